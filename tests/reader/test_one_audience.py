"""One audience for every path a row can travel (docs/design.md §11.1): the block and recall
read the room's membership through the same rule; a present stranger fails closed; a row shows
only where every human it names is; a world row learned from someone stays with those who heard
it, and a second human who states it joins them — it never becomes public. Each way a row once
leaked is a test here, through the real reader and write path."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, select

from memory_worker import app_side, reader
from memory_worker.core import tables as t
from memory_worker.models.scripted import ScriptedChat, candidate, sensible_route
from tests.reader.test_reader import add_row
from tests.scenes import CARA, DAN, people
from tests.write_helpers import rows, run_spell

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

NOW = "2026-12-01T12:00:00+00:00"


def room(db: Engine, room_id: str, kind: str, members: list[str]) -> None:
    with db.begin() as conn:
        app_side.add_room(conn, room_id, kind, members)


def say(db: Engine, room_id: str, *said: tuple[int | str, str]) -> list[int]:
    with db.begin() as conn:
        return [app_side.say(conn, room_id, who, text) for who, text in said]


def texts(block: reader.Block) -> str:
    return block.text


@pytest.fixture
def dm(db: Engine) -> Engine:
    """Room `dm`: private, Dan and Warren. Warren holds a row about Cara, Nolan (not a member)
    one about Dan; Warren a row about Dan and a world row."""
    people(db)
    room(db, "dm", "private", ["u:42", "warren"])
    with db.begin() as c:
        add_row(c, "warren", "u:17", "u:17 is pregnant.", witnessed=(CARA,))
        add_row(c, "nolan", "u:42", "u:42 owns a boat.")
        add_row(c, "warren", "u:42", "u:42 owns a flat in Xuhui.")
        add_row(c, "warren", "world", "The regatta is on Saturday.", witnessed=())
    return db


def recalled(persona: str, present: set[int], room_id: str) -> list[str]:
    got = reader.recall(persona, present, room_id, "x", block_ids=[], now=NOW, touch=False)
    return sorted(r.text for r in got)


def test_recall_reads_the_rooms_membership_as_the_block_does(dm: Engine) -> None:
    # Cara is no member of Dan's chat, Nolan is no member either
    assert recalled("warren", {CARA}, "dm") == ["The regatta is on Saturday."]
    block = reader.build_block("warren", {CARA}, "dm", touch=False)
    assert "pregnant" not in block.text and "regatta" in block.text
    assert recalled("nolan", {DAN}, "dm") == []
    assert reader.build_block("nolan", {DAN}, "dm", touch=False).text == ""


def test_a_present_stranger_adds_nothing_and_takes_the_rooms_privacy_away(dm: Engine) -> None:
    # The app says Cara is in Dan's private chat; the store says she is not
    alone = reader.build_block("warren", {DAN}, "dm", touch=False)
    assert "Xuhui" in alone.text and "told one-to-one" in alone.text
    with_stranger = reader.build_block("warren", {DAN, CARA}, "dm", touch=False)
    assert "Xuhui" not in with_stranger.text and "pregnant" not in with_stranger.text
    assert "told one-to-one" not in with_stranger.text and "regatta" in with_stranger.text
    assert recalled("warren", {DAN, CARA}, "dm") == ["The regatta is on Saturday."]


@pytest.mark.usefixtures("group_scope_measured")
def test_a_row_about_dan_that_names_cara_shows_only_where_both_are(db: Engine) -> None:
    # Through the write path: the extractor writes Cara's news into Dan's row
    people(db)
    room(db, "dm", "private", ["u:42", "warren"])
    room(db, "g", "group", ["u:42", "u:17", "warren"])
    (line,) = say(db, "dm", (DAN, "My sister Cara is pregnant, and I will be an uncle."))
    news = [
        candidate("u:42", "fact", "u:42 will be an uncle because u:17 is pregnant.", 7, [line]),
        candidate("u:42", "fact", "Dan says Cara is expecting a baby.", 7, [line]),
    ]
    run = run_spell(
        "warren", "dm", ScriptedChat({"extract": {"candidates": news}, "route": sensible_route})
    )
    assert run.status == "committed" and len(run.row_ids) == 2
    assert {r["named"] for r in rows(db)} == {json.dumps([CARA])}
    assert "pregnant" not in reader.build_block("warren", {DAN}, "dm", touch=False).text
    assert recalled("warren", {DAN}, "dm") == []
    both = reader.build_block("warren", {DAN, CARA}, "g", touch=False, proven_scope=False)
    assert "pregnant" in both.text and "expecting" in both.text
    got = reader.recall(
        "warren", {DAN, CARA}, "g", "x", block_ids=[], now=NOW, touch=False, proven_scope=False
    )
    assert len(got) == 2
    dan_only = reader.build_block("warren", {DAN}, "g", touch=False, proven_scope=False)
    assert "pregnant" not in dan_only.text and "expecting" not in dan_only.text


def secret_as_world_fact(db: Engine) -> int:
    """From Dan's private line, the extractor writes his secret as an unnamed
    world fact (the guard that a world row names no one cannot see it). Returns its row id."""
    people(db)
    room(db, "dm", "private", ["u:42", "warren"])
    room(db, "dm-cara", "private", ["u:17", "warren"])
    room(db, "g", "group", ["u:42", "u:17", "warren"])
    room(db, "g2", "group", ["u:17", "warren"])
    (line,) = say(db, "dm", (DAN, "I'm interviewing at Tencent on Thursday, don't tell anyone."))
    fact = candidate("world", "event", "An interview at Tencent is on Thursday.", 6, [line])
    run = run_spell(
        "warren", "dm", ScriptedChat({"extract": {"candidates": [fact]}, "route": sensible_route})
    )
    (row_id,) = run.row_ids
    return row_id


@pytest.mark.usefixtures("group_scope_measured")
def test_personal_news_written_as_a_world_fact_stays_with_the_human_who_said_it(
    db: Engine,
) -> None:
    row_id = secret_as_world_fact(db)
    (row,) = rows(db)
    assert row["id"] == row_id and row["private_to"] == json.dumps([DAN])
    assert "Tencent" in reader.build_block("warren", {DAN}, "dm", touch=False).text
    assert "Tencent" not in reader.build_block("warren", {CARA}, "dm-cara", touch=False).text
    assert recalled("warren", {CARA}, "dm-cara") == []
    for proven in (True, False):  # a group without Dan, whatever the group scope
        cara_group = reader.build_block("warren", {CARA}, "g2", touch=False, proven_scope=proven)
        assert "Tencent" not in cara_group.text
        got = reader.recall(
            "warren",
            {CARA},
            "g2",
            "Tencent",
            block_ids=[],
            now=NOW,
            touch=False,
            proven_scope=proven,
        )
        assert got == []
    # in a group with Dan, only once the group scope is on (the model's discretion, row (a))
    assert "Tencent" not in reader.build_block("warren", {DAN, CARA}, "g", touch=False).text
    assert (
        "Tencent"
        in reader.build_block("warren", {DAN, CARA}, "g", touch=False, proven_scope=False).text
    )


def test_a_second_human_who_states_a_world_fact_gets_her_own_row_and_it_stays_private(
    db: Engine,
) -> None:
    row_id = secret_as_world_fact(db)
    (again,) = say(db, "dm-cara", (CARA, "Did you hear? An interview at Tencent is on Thursday."))
    fact = candidate("world", "event", "An interview at Tencent is on Thursday.", 6, [again])
    run = run_spell(
        "warren",
        "dm-cara",
        ScriptedChat({"extract": {"candidates": [fact]}, "route": sensible_route}),
    )
    assert run.status == "committed" and len(run.row_ids) == 1  # her own, from her own line
    held = {r["id"]: r["private_to"] for r in rows(db)}
    assert held == {row_id: json.dumps([DAN]), run.row_ids[0]: json.dumps([CARA])}
    with db.connect() as c:
        found = t.memory_audience.c
        audience = c.execute(select(found.user_id).where(found.row_id == row_id)).scalars().all()
    assert sorted(audience) == [DAN]
    with db.begin() as conn:  # never public: a third human's chat does not hold it
        app_side.add_user(conn, 5, "Eve")
        app_side.add_room(conn, "dm-eve", "private", ["u:5", "warren"])
    assert "Tencent" not in reader.build_block("warren", {5}, "dm-eve", touch=False).text


def test_the_same_human_saying_it_again_does_not_make_it_public(db: Engine) -> None:
    secret_as_world_fact(db)
    (again,) = say(db, "dm", (DAN, "Reminder: an interview at Tencent is on Thursday."))
    fact = candidate("world", "event", "An interview at Tencent is on Thursday.", 6, [again])
    run_spell(
        "warren", "dm", ScriptedChat({"extract": {"candidates": [fact]}, "route": sensible_route})
    )
    (row,) = rows(db)
    assert row["private_to"] == json.dumps([DAN])
    assert "Tencent" not in reader.build_block("warren", {CARA}, "dm-cara", touch=False).text


def test_the_extraction_is_shown_what_the_rooms_block_could_hold_and_no_more(db: Engine) -> None:
    # a private world row of Dan's, and a row about Dan, are never shown in Cara's spell
    secret_as_world_fact(db)
    with db.begin() as c:
        add_row(c, "warren", "u:42", "u:42 owns a flat in Xuhui.")
    say(db, "g", (CARA, "Hi all."), (DAN, "Hello."))
    chat = ScriptedChat({"extract": {"candidates": []}, "route": sensible_route})
    run_spell("warren", "g", chat)
    ((purpose, _system, prompt),) = [c for c in chat.calls if c[0] == "extract"]
    assert "Tencent" not in prompt and "Xuhui" not in prompt  # a group: world facts only (v1)
    say(db, "dm-cara", (CARA, "Hello Warren."))
    chat = ScriptedChat({"extract": {"candidates": []}, "route": sensible_route})
    run_spell("warren", "dm-cara", chat)
    ((_, _, prompt),) = [c for c in chat.calls if c[0] == "extract"]
    assert "Tencent" not in prompt and "Xuhui" not in prompt
