"""The write path's steps run directly on a real SQLite file, without a broker: the commit's
contracts (one transaction, idempotent, never deletes, the cursor moves with it), stale
views re-routed, parks and skips, and the toast."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, select

from memory_worker import app_side
from memory_worker.core import tables as t
from memory_worker.core.rows import Spell
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import ScriptedChat, sensible_route
from memory_worker.write import steps
from tests.scenes import DAN, extract_answer, people, private_chat
from tests.write_helpers import mark_told

pytestmark = pytest.mark.store


def all_rows(eng: Engine) -> list[dict]:
    with eng.connect() as c:
        q = select(t.persona_memory).order_by(t.persona_memory.c.id)
        return [dict(r) for r in c.execute(q).mappings()]


def cursor(eng: Engine, persona: str = "warren", room: str = "dm-dan") -> int:
    with eng.connect() as c:
        return int(
            c.execute(
                select(t.cursors.c.last_line_id).where(
                    t.cursors.c.persona == persona, t.cursors.c.room_id == room
                )
            ).scalar()
            or 0
        )


def routed(spell: Spell, chat: ScriptedChat) -> Spell:
    spell = steps.run_extract(spell, chat)
    spell = steps.run_embed(spell, HashingEmbedder())
    return steps.run_route(spell, chat)


def full_spell(chat: ScriptedChat) -> tuple[Spell, list[int]]:
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    spell = routed(spell, chat)
    outcome = steps.run_commit(spell)
    return spell, outcome.row_ids


@pytest.fixture
def world(db: Engine) -> tuple[Engine, list[int]]:
    people(db)
    return db, private_chat(db)


def chat_for(lines: list[int]) -> ScriptedChat:
    return ScriptedChat({"extract": extract_answer(lines), "route": sensible_route})


def test_a_spell_commits_its_rows_and_moves_the_cursor(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    spell, row_ids = full_spell(chat_for(lines))
    rows = all_rows(db)
    assert [r["id"] for r in rows] == row_ids and len(rows) == 2
    flat = rows[0]
    assert flat["subject"] == "u:42" and flat["valid_from"] == "2026-07"
    assert json.loads(flat["witnessed"]) == [DAN] and json.loads(flat["evidence"]) == [lines[0]]
    assert len(flat["embedding"]) == 768
    assert cursor(db) == lines[-1]


def test_committing_the_same_spell_twice_writes_nothing_and_returns_the_same_rows(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    spell, row_ids = full_spell(chat_for(lines))
    again = steps.run_commit(spell)
    assert again.status == "committed" and again.row_ids == row_ids
    assert len(all_rows(db)) == 2


def test_every_step_run_twice_gives_the_same_result(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    chat = chat_for(lines)
    begun = steps.begin("warren", "dm-dan")
    assert begun is not None and steps.begin("warren", "dm-dan") == begun
    once = steps.run_extract(Spell.from_json(begun.to_json()), chat)
    twice = steps.run_extract(Spell.from_json(begun.to_json()), chat)
    assert once.candidates == twice.candidates
    e1 = steps.run_embed(Spell.from_json(once.to_json()), HashingEmbedder())
    e2 = steps.run_embed(Spell.from_json(once.to_json()), HashingEmbedder())
    assert e1.candidates == e2.candidates
    r1 = steps.run_route(Spell.from_json(e1.to_json()), chat)
    r2 = steps.run_route(Spell.from_json(e1.to_json()), chat)
    assert r1.decisions == r2.decisions and r1.seen_open_rows == r2.seen_open_rows
    c1 = steps.run_commit(r1)
    c2 = steps.run_commit(r2)
    assert c1.row_ids == c2.row_ids and len(all_rows(db)) == 2
    t1 = mark_told(r1)
    t2 = mark_told(r1)
    assert len(t1) == 1 and t2 == []


def test_an_update_closes_the_old_row_and_links_it(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    full_spell(chat_for(lines))
    with db.begin() as conn:
        moved = app_side.say(conn, "dm-dan", DAN, "Actually the flat in Xuhui is on Wulumuqi Road.")
    answer = {
        "candidates": [
            {
                "subject": "u:42",
                "kind": "fact",
                "text": "u:42 owns a flat in Xuhui on Wulumuqi Road.",
                "importance": 6,
                "evidence": [moved],
            }
        ]
    }
    _, new_ids = full_spell(ScriptedChat({"extract": answer, "route": sensible_route}))
    rows = {r["id"]: r for r in all_rows(db)}
    old = next(r for r in rows.values() if r["text"] == "u:42 owns a flat in Xuhui.")
    assert old["valid_to"] is not None and old["closed_by"] == new_ids[0]
    assert rows[new_ids[0]]["valid_to"] is None
    assert len(rows) == 3  # nothing deleted


def test_a_close_sets_valid_to_and_writes_no_row(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    full_spell(chat_for(lines))
    with db.begin() as conn:
        sold = app_side.say(conn, "dm-dan", DAN, "I sold the flat in Xuhui in November.")
    answer = {
        "candidates": [
            {
                "subject": "u:42",
                "kind": "fact",
                "text": "u:42 sold the flat in Xuhui.",
                "importance": 6,
                "valid_from": "2026-11",
                "evidence": [sold],
            }
        ]
    }
    _, new_ids = full_spell(ScriptedChat({"extract": answer, "route": sensible_route}))
    old = next(r for r in all_rows(db) if r["text"] == "u:42 owns a flat in Xuhui.")
    assert new_ids == [] and old["valid_to"] == "2026-11" and old["closed_by"] is None
    assert cursor(db) == sold


def test_a_stale_view_of_the_open_rows_is_caught_and_rerouting_adds_nothing_twice(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    chat = chat_for(lines)
    first = steps.begin("warren", "dm-dan")
    assert first is not None
    # Two spells over the same lines, both routed before either commits.
    a = routed(Spell.from_json(first.to_json()), chat)
    with db.begin() as conn:
        app_side.say(conn, "dm-dan", "warren", "Good luck.")
    b_begun = steps.begin("warren", "dm-dan")
    assert b_begun is not None and b_begun.last_line_id != a.last_line_id
    b = routed(b_begun, chat)
    assert steps.run_commit(a).status == "committed"
    assert steps.run_commit(b).status == "stale"
    b = steps.run_route(b, chat)  # what the commit task does on 'stale'
    outcome = steps.run_commit(b)
    assert outcome.status == "committed" and outcome.row_ids == []
    assert len(all_rows(db)) == 2


def test_a_parked_spell_records_why_and_leaves_the_cursor(world) -> None:  # type: ignore[no-untyped-def]
    db, _ = world
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    spell.parked = "malformed model answer"
    assert steps.run_commit(spell).status == "parked"
    assert cursor(db) == 0
    with db.connect() as c:
        status, reason = c.execute(select(t.spells.c.status, t.spells.c.reason)).one()
    assert (status, reason) == ("parked", "malformed model answer")


# A kit is judged at the time of each line: tests/write/test_labels.py.
@pytest.mark.parametrize("switch", ["memory_off", "muted", "incognito"])
def test_a_skipped_spell_calls_no_model_and_never_mines_those_lines_later(world, switch) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    with db.begin() as conn:
        if switch == "memory_off":
            conn.execute(t.users.update().where(t.users.c.id == DAN).values(memory_on=0))
        elif switch == "muted":
            conn.execute(t.persona_memory_mute.insert().values(user_id=DAN, persona="warren"))
        else:
            conn.execute(t.rooms.update().values(incognito=1))
    chat = chat_for(lines)
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None and spell.skipped
    spell = routed(spell, chat)
    assert chat.calls == []
    assert steps.run_commit(spell).status == "skipped"
    assert all_rows(db) == [] and cursor(db) == lines[-1]


def test_the_toast_is_one_notice_per_human_naming_its_rows(world) -> None:  # type: ignore[no-untyped-def]
    db, lines = world
    spell, row_ids = full_spell(chat_for(lines))
    toasts = mark_told(spell)
    assert [x.user_id for x in toasts] == [DAN]
    with db.connect() as c:
        notice = c.execute(select(t.notices)).mappings().one()
    assert json.loads(notice["row_ids"]) == row_ids
    assert notice["text"].startswith("Warren noted: Dan owns a flat in Xuhui")
    assert notice["text"].endswith(" · undo") and "u:42" not in notice["text"]


def test_a_human_who_muted_the_persona_is_not_in_the_present_set_the_model_sees(db: Engine) -> None:
    people(db)
    with db.begin() as conn:
        app_side.add_room(conn, "g1", "group", [f"u:{DAN}", "u:17", "warren"])
        app_side.say(conn, "g1", DAN, "I bought a flat.")
        cara = app_side.say(conn, "g1", 17, "I run marathons.")
        conn.execute(t.persona_memory_mute.insert().values(user_id=DAN, persona="warren"))
    chat = ScriptedChat(
        {
            "extract": {
                "candidates": [
                    {
                        "subject": "u:42",
                        "kind": "fact",
                        "text": "u:42 owns a flat.",
                        "importance": 6,
                        "evidence": [cara - 1],
                    },
                    {
                        "subject": "u:17",
                        "kind": "preference",
                        "text": "u:17 runs marathons.",
                        "importance": 5,
                        "evidence": [cara],
                    },
                ]
            },
            "route": sensible_route,
        }
    )
    spell = steps.begin("warren", "g1")
    assert spell is not None and spell.present == [17] and spell.witnessed == [17, DAN]
    spell = routed(spell, chat)
    (_, _, prompt) = chat.calls[0]
    assert "- u:17 (Cara)" in prompt and "u:42 (Dan)" not in prompt
    assert steps.run_commit(spell).status == "committed"
    assert [r["text"] for r in all_rows(db)] == ["u:17 runs marathons."]
    assert json.loads(all_rows(db)[0]["witnessed"]) == [17, DAN]  # the audience, muted or not


@pytest.mark.parametrize(
    "guess", [(), (DAN,), (17, DAN), (17, DAN, 99), (99,)], ids=lambda g: f"guess={list(g)}"
)
def test_a_spell_begins_with_the_rooms_members_now_whoever_the_caller_last_saw(
    db: Engine, guess: tuple[int, ...]
) -> None:
    """The fan-out hands on the members it read; a guess that is stale (someone joined, left,
    or never existed) is read again, never used."""
    people(db)
    with db.begin() as conn:
        app_side.add_room(conn, "g1", "group", [f"u:{DAN}", "u:17", "warren"])
        app_side.say(conn, "g1", DAN, "I bought a flat.")
        conn.execute(t.persona_memory_mute.insert().values(user_id=DAN, persona="warren"))
    spell = steps.begin("warren", "g1", guess)
    assert spell is not None and spell.present == [17] and spell.witnessed == [17, DAN]
    assert spell == steps.begin("warren", "g1")


def test_a_spell_from_a_message_that_outlived_its_store_moves_no_cursor_and_records_nothing(
    world,  # type: ignore[no-untyped-def]
) -> None:
    """A queue keeps its messages while the store is restored from a backup (or replaced): a
    spell read from the old store names lines this one does not have. Committed, it would
    move the cursor past lines not yet said here, and they would never be read."""
    db, lines = world
    chat = chat_for(lines)
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    spell = routed(spell, chat)
    ahead = Spell.from_json(spell.to_json())
    ahead.last_line_id = max(lines) + 5  # the old store's room had said more
    with db.begin() as conn:  # a line of another room holds the id another message names
        app_side.add_room(conn, "dm-elsewhere", "private", ["u:42", "warren"])
        other = app_side.say(conn, "dm-elsewhere", "u:42", "Hello there.")
    elsewhere = Spell.from_json(spell.to_json())
    elsewhere.last_line_id = other
    for foreign in (ahead, elsewhere):
        assert steps.run_commit(foreign).status == "foreign"
    assert cursor(db) == 0 and all_rows(db) == []
    with db.connect() as c:
        assert c.execute(select(t.spells)).all() == []  # its key may yet be a real spell's
    outcome = steps.run_commit(spell)  # the room's own spell still commits its lines
    assert outcome.status == "committed" and outcome.row_ids
    assert cursor(db) == spell.last_line_id
