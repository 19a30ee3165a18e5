"""The read cache on a real SQLite file: the block is the same whether the cache is cold, warm
or was made stale by another process; memory stays under its byte bound; audiences of one
persona share one entry; a persona bigger than the bound ranks on the vectors that fit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import Engine, create_engine, insert, update

from memory_worker import app_side, reader, store
from memory_worker import settings as settings_mod
from memory_worker import tables as t
from memory_worker.read_cache import ReadCache
from memory_worker.reader import build_block
from memory_worker.vectors import quantise

NOW = "2026-12-01T12:00:00+00:00"
DAN, CARA = 42, 17
DIMS = 16  # small vectors: the bound is about rows, not the embedding model

pytestmark = pytest.mark.store


def vector(rng: np.random.Generator) -> bytes:
    return quantise(rng.normal(size=DIMS))


@pytest.fixture
def store_rows(db: Engine) -> np.random.Generator:
    """Warren knows 120 things about Dan, 60 about Cara and 40 about the world; Nolan a few.
    Rooms: a private chat with each, each also with a topic."""
    rng = np.random.default_rng(3)
    with store.transaction() as c:
        for uid, name in ((DAN, "Dan"), (CARA, "Cara")):
            app_side.add_user(c, uid, name)
        for slug in ("warren", "nolan"):
            app_side.add_persona(c, slug, slug.title())
        for room, who in (("dm", DAN), ("dm-cara", CARA), ("topic", DAN), ("topic-cara", CARA)):
            app_side.add_room(c, room, "private", [f"u:{who}", "warren", "nolan"])
        for room in ("topic", "topic-cara"):
            c.execute(
                update(t.rooms).where(t.rooms.c.id == room).values(topic_embedding=vector(rng))
            )
        rows = []
        for persona, subject, n in (
            ("warren", "u:42", 120),
            ("warren", "u:17", 60),
            ("warren", "world", 40),
            ("nolan", "u:42", 30),
        ):
            rows += [new_row(rng, persona, subject, i) for i in range(n)]
        c.execute(insert(t.persona_memory), rows)
    reader.READ_CACHE.clear()
    return rng


def new_row(rng: np.random.Generator, persona: str, subject: str, i: int) -> dict:
    kind = ["fact", "preference", "event", "relationship", "open_loop"][i % 5]
    return {
        "persona": persona,
        "subject": subject,
        "counterpart": None,
        "witnessed": json.dumps([DAN]),
        "room_id": "dm",
        "kind": kind,
        "text": f"{subject} said thing {i} " + "x" * int(rng.integers(10, 80)),
        "importance": int(rng.integers(3, 11)),
        "evidence": "[1]",
        "created": f"2026-{1 + i % 11:02d}-{1 + i % 27:02d}T10:00:00+00:00",
        "embedding": vector(rng),
    }


def texts() -> list[str]:
    """Every block of both personas in every room, with and without the cache."""
    out = []
    for room, who in (("dm", DAN), ("dm-cara", CARA), ("topic", DAN), ("topic-cara", CARA)):
        for persona in ("warren", "nolan"):
            out.append(build_block(persona, {who}, room, now=NOW, touch=False).text)
    return out


def held(persona: str):  # type: ignore[no-untyped-def]
    return reader.READ_CACHE._entries[(settings_mod.current().database_url, persona)]


def cold() -> list[str]:
    reader.READ_CACHE.clear()
    return texts()


@pytest.mark.parametrize("change", ["a new row", "a closed row", "a touch", "nothing"])
def test_the_block_is_the_same_cold_warm_and_after_another_process_wrote(
    store_rows: np.random.Generator, db: Engine, change: str
) -> None:
    first = cold()
    assert first == texts(), "warm"
    other = create_engine(db.url.render_as_string(hide_password=False))  # not the reader's
    pm = t.persona_memory.c
    with other.begin() as c:
        if change == "a new row":
            row = new_row(store_rows, "warren", "u:42", 999)
            row.update(text="u:42 just moved to Lisbon.", importance=10)
            row.update(created="2026-11-30T10:00:00+00:00")
            c.execute(insert(t.persona_memory).values(**row))
        elif change == "a closed row":
            winner = build_block("warren", {DAN}, "topic", now=NOW, touch=False).row_ids[0]
            c.execute(update(t.persona_memory).where(pm.id == winner).values(valid_to="2026-11-30"))
        elif change == "a touch":
            c.execute(
                update(t.persona_memory)
                .where(pm.id % 3 == 0)
                .values(last_recalled="2026-11-30T09:00:00+00:00", recall_count=1)
            )
    other.dispose()
    after = texts()  # a cache miss: refetched, vectors carried over
    carried = held("warren")
    assert after == cold()
    fresh = held("warren")
    assert np.array_equal(carried.ids, fresh.ids)
    assert np.array_equal(carried.vectors, fresh.vectors)
    assert carried.cosines.keys() == fresh.cosines.keys()
    for topic, cos in fresh.cosines.items():
        assert np.array_equal(carried.cosines[topic], cos), "the cosines a cold open computes"
    if change == "a new row":
        assert "Lisbon" in after[0] and "Lisbon" in after[4]
    elif change == "nothing":
        assert after == first


def test_the_cache_stays_under_its_byte_bound(store_rows: np.random.Generator) -> None:
    bound = 40_000  # about two personas' columns with vectors, not more
    want = cold()
    small = ReadCache(max_bytes=bound)
    reader.READ_CACHE, saved = small, reader.READ_CACHE
    try:
        for _ in range(3):
            assert texts() == want, "a small cache changes no block"
            assert 0 < small.bytes <= bound
            held = list(small._entries.values())
            assert small.bytes == sum(e.nbytes for e in held)
    finally:
        reader.READ_CACHE = saved


def test_audiences_of_one_persona_share_one_entry(store_rows: np.random.Generator) -> None:
    reader.READ_CACHE.clear()
    build_block("warren", {DAN}, "topic", now=NOW, touch=False)
    after_dan = reader.READ_CACHE.bytes
    build_block("warren", {CARA}, "topic-cara", now=NOW, touch=False)
    keys = [k for k in reader.READ_CACHE._entries if k[1] == "warren"]
    assert len(keys) == 1, "one entry for Warren, whoever is in the room"
    grown = reader.READ_CACHE.bytes - after_dan
    assert grown == (180 + 40) * 8, "Cara's room added one topic's cosines, no rows"


def test_a_persona_past_the_bound_ranks_its_oldest_rows_without_relevance(
    store_rows: np.random.Generator, db: Engine
) -> None:
    bound = 19_700  # Warren's 220 rows of columns fit; the vectors of only about 100
    small = ReadCache(max_bytes=bound)
    reader.READ_CACHE, saved = small, reader.READ_CACHE
    try:
        got = build_block("warren", {DAN}, "topic", now=NOW, touch=False).text
        entry = small._entries[(settings_mod.current().database_url, "warren")]
        cut = int(entry.vectors_from)
        assert 0 < cut < len(entry), "some vectors fit, not all"
        assert small.bytes <= bound
        assert got == build_block("warren", {DAN}, "topic", now=NOW, touch=False).text, "warm"
        oldest = entry.ids[cut - 1]
    finally:
        reader.READ_CACHE = saved
    # The same ranking as a store whose oldest rows have no embedding, with room to spare.
    with store.transaction() as c:
        pm = t.persona_memory.c
        c.execute(
            update(t.persona_memory)
            .where(pm.persona == "warren", pm.id <= int(oldest))
            .values(embedding=None)
        )
    assert got == cold()[4]


def test_the_bound_comes_from_one_setting_named_in_its_error() -> None:
    env = {"MW_READ_CACHE_BYTES": "64000000"}
    assert settings_mod.Settings.from_env(env).read_cache_bytes == 64_000_000
    assert settings_mod.Settings.from_env({}).read_cache_bytes == 256 * 2**20
    with pytest.raises(settings_mod.ConfigError, match="MW_READ_CACHE_BYTES"):
        settings_mod.Settings.from_env({"MW_READ_CACHE_BYTES": "lots"})
