"""On-demand recall (docs/design.md §3.1): what a human's message is about, through the block's
audience rule, never what the block already holds, touching what it returns."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from sqlalchemy import Engine, select, update

from memory_worker import app_side, reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.vectors import quantise
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.storage import store
from memory_worker.write.embed import embeddable_text
from tests.examples import examples
from tests.reader.test_reader import (  # noqa: F401 — fixtures and helpers shared with the block
    CARA,
    DAN,
    NOW,
    PERSONAS,
    World,
    add_row,
    cast,
    load_world,
    shared_url,
    worlds,
)

SAIL, BAKE = quantise([1.0, 0.0, 0.0]), quantise([0.0, 1.0, 0.0])
OTHER = quantise([0.0, 0.0, 1.0])


def talk(db: Engine, fresh: int = 12) -> dict[str, int]:
    """Dan and Warren in a private chat; an old row about sailing, `fresh` newer unrelated ones
    (they fill the block: it has no topic)."""
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_user(c, CARA, "Cara")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_room(c, "dm", "private", ["u:42", "warren"])
        app_side.add_room(c, "group", "group", ["u:42", "u:17", "warren"])
        ids = {
            "sail": add_row(
                c, "warren", "u:42", "u:42 sails.", embedding=SAIL, created="2025-01-05T10:00:00"
            ),
            "bake": add_row(
                c, "warren", "u:42", "u:42 bakes.", embedding=BAKE, created="2025-02-05T10:00:00"
            ),
            "world": add_row(
                c, "warren", "world", "A regatta is on.", witnessed=(), embedding=SAIL
            ),
            "cara": add_row(c, "warren", "u:17", "u:17 sails too.", embedding=SAIL),
        }
        for i in range(fresh):
            day = f"2026-11-{10 + i:02d}T10:00:00"
            ids[f"fresh{i}"] = add_row(
                c, "warren", "u:42", f"u:42 did {i}.", embedding=OTHER, created=day
            )
    return ids


def test_recall_finds_what_the_message_is_about_beyond_the_block(db: Engine) -> None:
    ids = talk(db)
    block = reader.build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert ids["sail"] not in block.row_ids  # old: the block without a topic left it out
    got = reader.recall("warren", {DAN}, "dm", "sailing?", k=2, query_vector=SAIL, now=NOW)
    assert [r.id for r in got][:1] == [ids["sail"]]
    assert not {r.id for r in got} & set(block.row_ids)


def test_recall_never_returns_a_row_the_block_holds(db: Engine) -> None:
    ids = talk(db)
    held = [ids["sail"], ids["world"]]
    got = reader.recall(
        "warren", {DAN}, "dm", "sailing?", k=3, query_vector=SAIL, block_ids=held, now=NOW
    )
    assert got and not {r.id for r in got} & set(held)


def test_recall_touches_what_it_returns_and_nothing_else(db: Engine) -> None:
    ids = talk(db)
    got = reader.recall("warren", {DAN}, "dm", "sailing?", k=1, query_vector=SAIL, now=NOW)
    assert reader.flush_touches(timeout=10)  # the touch is applied in the background
    pm = t.persona_memory.c
    with store.engine().connect() as c:
        touched = dict(c.execute(select(pm.id, pm.recall_count).where(pm.recall_count > 0)).all())
    assert touched == {got[0].id: 1} and got[0].id == ids["sail"]
    block = reader.build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert ids["sail"] in block.row_ids  # recalled today: fresh again, and the cache knows it


def test_recall_in_an_incognito_room_returns_nothing(db: Engine) -> None:
    talk(db)
    with store.transaction() as c:
        c.execute(update(t.rooms).where(t.rooms.c.id == "dm").values(incognito=1))
    assert reader.recall("warren", {DAN}, "dm", "sailing?", query_vector=SAIL, now=NOW) == []


def test_recall_in_a_group_gives_world_facts_only_under_the_proven_scope(db: Engine) -> None:
    ids = talk(db)
    both = {DAN, CARA}
    got = reader.recall("warren", both, "group", "s", k=9, query_vector=SAIL, block_ids=(), now=NOW)
    assert [r.id for r in got] == [ids["world"]]
    assert reader.recall("warren", both, "group", "s", query_vector=SAIL, now=NOW) == []  # held


def test_recall_never_returns_a_row_about_a_human_who_muted_the_persona(db: Engine) -> None:
    talk(db)
    with store.transaction() as c:
        c.execute(t.persona_memory_mute.insert().values(user_id=DAN, persona="warren"))
    got = reader.recall("warren", {DAN}, "dm", "s", k=20, query_vector=SAIL, now=NOW)
    assert {r.subject for r in got} <= {"world"}


def test_a_text_query_is_embedded_by_the_configured_embedder_and_names_find_ids(
    db: Engine,
) -> None:
    settings_mod.configure(settings_mod.current().with_(embedder="hashing"))  # the db fixture
    hashing = HashingEmbedder()  # restores the settings after the test
    # The row the message is about comes second: ties go to the older row, so only the
    # message's vector can put it first (docs/mutation.md: x_recall__mutmut_46).
    texts = {"cake": "u:42 bakes lemon cake.", "boat": "u:42 keeps a boat in Qingdao."}
    with store.transaction() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_room(c, "dm", "private", ["u:42", "warren"])
        ids = {
            k: add_row(
                c,
                "warren",
                "u:42",
                v,
                embedding=quantise(hashing.vector(embeddable_text(v, {DAN: "Dan"}))),
            )
            for k, v in texts.items()
        }
    got = reader.recall("warren", {DAN}, "dm", "Where is Dan's boat?", k=1, block_ids=(), now=NOW)
    assert [r.id for r in got] == [ids["boat"]]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds)
def test_recall_returns_exactly_what_the_audience_rule_admits_and_nothing_else(
    shared_url: str,  # noqa: F811
    world: tuple,  # type: ignore[type-arg]
) -> None:
    w = load_world(shared_url, world)
    before = settings_mod.current()  # the group scope on a store with no verdict: the override
    settings_mod.configure(before.with_(memory_scope_override=True))
    try:
        recall_as_the_audience_rule_says(w, url=shared_url)
    finally:
        settings_mod.configure(before)


def recall_as_the_audience_rule_says(w: World, url: str) -> None:
    for persona in PERSONAS:
        for proven in (True, False):
            got = reader.recall(
                persona,
                w.present,
                "r",
                "anything",
                k=100,
                query_vector=SAIL,
                block_ids=(),
                now=NOW,
                url=url,
                touch=False,
                proven_scope=proven,
            )
            allowed = w.allowed(persona, proven)
            assert sorted(r.id for r in got) == sorted(r.id for r in allowed)
            assert {r.id: r.confidence for r in got} == {r.id: r.confidence for r in allowed}
            block = reader.build_block(
                persona, w.present, "r", now=NOW, url=url, touch=False, proven_scope=proven
            )
            assert set(block.row_ids) <= {r.id for r in allowed}  # one audience, both readers
