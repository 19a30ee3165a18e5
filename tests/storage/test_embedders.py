"""The store knows its embedder: the first to write claims it, another is refused with an error
that says how to switch, `reembed` switches resumably, a rename re-embeds; and the local
embedder runs offline from its wheel."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from sqlalchemy import Engine, select

from memory_worker import app_side, cli, models, reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.errors import EmbedderMismatch
from memory_worker.core.rows import Spell
from memory_worker.core.vectors import quantise
from memory_worker.models import named_embedder
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.local import E5Embedder, threads_in_use
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import store, users
from memory_worker.write import steps
from memory_worker.write.embed import embeddable_text
from memory_worker.write.reembed import reembed_rows_naming, reembed_store
from tests.reader.test_reader import DAN, NOW, add_row

pytestmark = pytest.mark.store


def spell_with(text: str) -> Spell:
    candidate = {"subject": "u:42", "kind": "fact", "text": text, "importance": 5}
    return Spell("warren", "dm", 0, 1, present=[DAN], candidates=[{**candidate, "evidence": [1]}])


def store_identity() -> store_embedder.Identity | None:
    with store.engine().connect() as conn:
        return store_embedder.identity(conn)


def vectors() -> dict[int, bytes]:
    pm = t.persona_memory.c
    with store.engine().connect() as conn:
        return dict(conn.execute(select(pm.id, pm.embedding)).all())


@pytest.fixture
def dan(db: Engine) -> dict[str, int]:
    """Dan, Warren, a private chat with a topic, three rows embedded by the hashing embedder,
    which the settings name (the `db` fixture puts the settings back after the test)."""
    settings_mod.configure(settings_mod.current().with_(embedder="hashing"))
    hashing = HashingEmbedder()
    texts = ["u:42 keeps a boat in Qingdao.", "u:42 bakes lemon cake.", "u:42 runs at dawn."]
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_room(c, "dm", "private", ["u:42", "warren"], topic="boats")
        ids = {
            text: add_row(c, "warren", "u:42", text, embedding=quantise(hashing.vector(text)))
            for text in texts
        }
        store_embedder.check(c, hashing.name, hashing.dims)
    return ids


def test_the_first_embedder_to_write_claims_the_store(db: Engine) -> None:
    assert store_identity() is None
    steps.run_embed(spell_with("u:42 sails."), HashingEmbedder())
    assert store_identity() == store_embedder.Identity("hashing", 768)


@pytest.mark.parametrize("other", [HashingEmbedder(dims=384), E5Embedder()])
def test_another_embedder_is_refused_and_the_spell_parks_saying_how_to_switch(
    db: Engine, other
) -> None:  # type: ignore[no-untyped-def]
    steps.run_embed(spell_with("u:42 sails."), HashingEmbedder())
    parked = steps.run_embed(spell_with("u:42 rows."), other)
    assert parked.parked and "memory-worker reembed" in parked.parked
    assert (
        "hashing's (768 dims)" in parked.parked and f"{other.name} ({other.dims}" in parked.parked
    )
    assert all("embedding" not in c or c["embedding"] is None for c in parked.candidates)


def test_recall_refuses_to_embed_a_query_with_another_model(dan: dict[str, int]) -> None:
    before = settings_mod.current()
    settings_mod.configure(before.with_(embedder="e5"))
    try:
        with pytest.raises(EmbedderMismatch, match="memory-worker reembed"):
            reader.recall("warren", {DAN}, "dm", "Where is Dan's boat?", now=NOW)
    finally:
        settings_mod.configure(before)


def test_reembed_switches_every_row_and_topic_and_resumes_where_it_stopped(
    dan: dict[str, int],
) -> None:
    e5 = E5Embedder()
    first = reembed_store(e5, batch=2, max_batches=1)  # stopped after one batch
    assert not first.done and first.rows == 2
    got = vectors()
    assert sorted(len(v) for v in got.values()) == [384, 384, 768]
    have = store_identity()
    assert have is not None and (have.name, have.pending_name) == ("hashing", e5.name)
    refused = steps.run_embed(spell_with("u:42 sails."), HashingEmbedder())
    assert refused.parked  # during the switch only the new embedder may write

    rest = reembed_store(e5, batch=2)
    assert rest.done and (rest.rows, rest.rooms) == (1, 1)
    assert store_identity() == store_embedder.Identity(e5.name, 384)
    for row_id, blob in vectors().items():
        text = next(k for k, v in dan.items() if v == row_id)
        (want,) = e5.embed([embeddable_text(text, {DAN: "Dan"})], purpose="rows")
        assert blob == quantise(want)
    with store.engine().connect() as conn:
        topic = conn.execute(select(t.rooms.c.topic_embedding)).scalar_one()
    assert topic == quantise(e5.embed(["boats"], purpose="topic")[0])
    assert reembed_store(e5).batches == 0  # nothing left to do


def test_the_cli_reembeds_with_the_configured_embedder(
    dan: dict[str, int], capsys: pytest.CaptureFixture[str]
) -> None:
    before = settings_mod.current()
    settings_mod.configure(before.with_(embedder="e5"))
    try:
        assert cli.main(["reembed", "--batch", "2"]) == 0
        got = reader.recall(
            "warren",
            {DAN},
            "dm",
            "Where does Dan keep his boat?",
            k=1,
            block_ids=(),
            now=NOW,
            touch=False,
        )
    finally:
        settings_mod.configure(before)
    assert "done: 3 rows and 1 room topics" in capsys.readouterr().out
    assert [r.id for r in got] == [dan["u:42 keeps a boat in Qingdao."]]


def test_a_rename_embeds_the_rows_that_name_the_human_again(dan: dict[str, int]) -> None:
    hashing = HashingEmbedder()
    with store.transaction() as c:
        users.rename_user(c, DAN, "Zebulon")
    assert reembed_rows_naming(hashing, DAN) == 3
    boat = dan["u:42 keeps a boat in Qingdao."]
    want = quantise(hashing.vector("Zebulon keeps a boat in Qingdao."))
    assert vectors()[boat] == want
    got = reader.recall("warren", {DAN}, "dm", "Zebulon's boat", k=1, block_ids=(), now=NOW)
    assert [r.id for r in got] == [boat]


def test_the_local_embedder_runs_offline_from_its_wheel_with_query_and_passage_sides() -> None:
    e5 = named_embedder("e5")
    rows = e5.embed(["Dan keeps a boat in Qingdao.", "Dan bakes lemon cake."], purpose="rows")
    (query,) = e5.embed(["Where is Dan's boat?"], purpose="query")
    m, q = np.array(rows), np.array(query)
    assert m.shape == (2, 384) and np.allclose(np.linalg.norm(m, axis=1), 1, atol=1e-3)
    assert m[0] @ q > m[1] @ q
    (as_row,) = e5.embed(["Where is Dan's boat?"], purpose="rows")
    assert not np.allclose(as_row, query)  # e5's "query: " and "passage: " sides differ
    assert json.dumps(query)  # plain floats, ready for quantise


def test_with_no_gemini_key_the_store_embeds_with_e5_and_hashing_stays_a_choice() -> None:
    assert models.embedder_name(settings_mod.Settings.from_env({})) == "e5"
    hashing = settings_mod.Settings.from_env({"MW_EMBEDDER": "hashing"})
    assert models.embedder_name(hashing) == "hashing"
    live = settings_mod.Settings.from_env({"MW_PROVIDER": "gemini", "GEMINI_API_KEY": "k"})
    assert models.embedder_name(live) == "gemini"


def _threads_after_an_embedding(threads: int) -> int:
    """In a fresh thread (OpenMP's count is per thread): embed, then ask the runtime."""
    e5 = named_embedder("e5", settings_mod.Settings.from_env({"MW_EMBED_THREADS": str(threads)}))
    seen: list[int] = []

    def embed_then_look() -> None:
        e5.embed(["Where is Dan's boat?"], purpose="query")
        seen.append(threads_in_use())

    worker = threading.Thread(target=embed_then_look)
    worker.start()
    worker.join()
    return seen[0]


def test_a_query_embeds_on_one_thread_unless_mw_embed_threads_says_more() -> None:
    assert settings_mod.Settings.from_env({}).embed_threads == 1
    assert _threads_after_an_embedding(1) == 1
    assert _threads_after_an_embedding(3) == 3


def test_the_model_loads_once_per_process_however_many_embedders_are_built() -> None:
    one = named_embedder("e5", settings_mod.Settings.from_env({}))
    other = named_embedder("e5", settings_mod.Settings.from_env({"MW_EMBED_THREADS": "2"}))
    assert isinstance(one, E5Embedder) and isinstance(other, E5Embedder)
    assert one._model is other._model  # each task's settings build an embedder, not a model
