"""Provenance decides who may know: each of the write path's label holes, reproduced with the
scripted model playing an attacker, through the real write path, store, reader and page.

The secret: in Dan's private chat with Warren, "I'm interviewing at Tencent on Thursday, don't
tell anyone." Whatever the model writes or routes afterwards, it must never reach Cara's chat,
Eve's chat, a group without Dan, recall there, or anyone's page but Dan's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from memory_worker import app_side, controls, reader
from memory_worker.core import tables as t
from memory_worker.models.scripted import ScriptedChat, candidate, route_payload, sensible_route
from memory_worker.storage import notices, store, users
from memory_worker.web import page_model
from tests.write_helpers import prompts, rows, run_spell

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

DAN, CARA, EVE, ZED = 42, 17, 5, 99
SECRET = "I'm interviewing at Tencent on Thursday, don't tell anyone."
WORLD_SECRET = "An interview at Tencent is on Thursday."
NOW = "2026-12-01T12:00:00+00:00"


@pytest.fixture
def world(db: Engine) -> Engine:
    """Dan, Cara and Eve; each has a private chat with Warren; groups of Dan and Cara (g-dc),
    Cara and Eve (g-ce)."""
    with db.begin() as c:
        for uid, name in ((DAN, "Dan"), (CARA, "Cara"), (EVE, "Eve"), (ZED, "Zed")):
            app_side.add_user(c, uid, name)
        app_side.add_persona(c, "warren", "Warren")
        for uid, room in ((DAN, "dm-dan"), (CARA, "dm-cara"), (EVE, "dm-eve")):
            app_side.add_room(c, room, "private", [f"u:{uid}", "warren"])
        app_side.add_room(c, "g-dc", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
        app_side.add_room(c, "g-ce", "group", [f"u:{CARA}", f"u:{EVE}", "warren"])
    return db


def say(db: Engine, room_id: str, *said: tuple[int | str, str]) -> list[int]:
    with db.begin() as conn:
        return [app_side.say(conn, room_id, who, text) for who, text in said]


def extracting(*cands: dict[str, Any], route: object = sensible_route) -> ScriptedChat:
    return ScriptedChat({"extract": {"candidates": list(cands)}, "route": route})


def hostile_router(event: str) -> Callable[[str], dict[str, Any]]:
    """A router that names neighbour "0" (or the first number it was shown) for every
    candidate: NONE says it confirms it, UPDATE and CLOSE try to replace or end it."""

    def answer(prompt: str) -> dict[str, Any]:
        shown, cands = route_payload(prompt)
        target = shown[0]["id"] if shown else "0"
        return {
            "decisions": [
                {"candidate": c["candidate"], "event": event, "old_id": target} for c in cands
            ]
        }

    return answer


def plant_secret(db: Engine) -> int:
    """Dan tells Warren; the extractor launders it into a world row citing Dan's line."""
    (line,) = say(db, "dm-dan", (DAN, SECRET))
    run = run_spell(
        "warren", "dm-dan", extracting(candidate("world", "event", WORLD_SECRET, 6, [line]))
    )
    (row_id,) = run.row_ids
    return row_id


def seen_by(db: Engine, human: int, room_id: str, present: set[int] | None = None) -> str:
    """Everything Warren would have in mind in this room with these humans present: the block
    (cold and warm) and recall for the secret's words."""
    who = present or {human}
    reader.close()
    cold = reader.build_block("warren", who, room_id, touch=False).text
    warm = reader.build_block("warren", who, room_id, touch=False).text
    got = reader.recall("warren", who, room_id, "Tencent interview Thursday", block_ids=[], now=NOW)
    return "\n".join([cold, warm, *(r.text for r in got)])


def page_text(human: int) -> str:
    page = page_model.manage_page(human)
    found = page_model.evidence(human, page)
    lines = [line for s in page.personas for line in s.lines]
    shown = [line.text for line in lines]
    shown += [e.text or "" for ev in found.values() for e in ev]
    shown += [str(line.room_id) for line in lines]
    return "\n".join(shown)


def assert_only_dan_knows(db: Engine) -> None:
    for human, room_id, present in (
        (CARA, "dm-cara", None),
        (EVE, "dm-eve", None),
        (CARA, "g-ce", {CARA, EVE}),
    ):
        assert "Tencent" not in seen_by(db, human, room_id, present), (human, room_id)
    for human in (CARA, EVE):
        page = page_text(human)
        assert "Tencent" not in page and "dm-dan" not in page, human


# --- 1. a private world fact never goes public on the router's word -------------------------


@pytest.mark.parametrize("event", ["NONE", "UPDATE", "CLOSE"])
@pytest.mark.parametrize(
    "said", ["Thursday is my day off.", "Hi Warren, how are you?", WORLD_SECRET]
)
def test_a_router_naming_the_secret_row_from_cara_s_chat_changes_nothing(
    world: Engine, event: str, said: str
) -> None:
    row_id = plant_secret(world)
    (line,) = say(world, "dm-cara", (CARA, said))
    text = WORLD_SECRET if said == WORLD_SECRET else "A day off is on Thursday."
    chat = extracting(candidate("world", "event", text, 6, [line]), route=hostile_router(event))
    run_spell("warren", "dm-cara", chat)
    shown = [m["text"] for p in prompts(chat, "route") for m in route_payload(p)[0]]
    assert all("Tencent" not in m for m in shown)  # the router never sees Dan's row
    secret = next(r for r in rows(world) if r["id"] == row_id)
    assert secret["valid_to"] is None
    assert secret["private_to"] == json.dumps([DAN])  # she never joins it, whatever she says
    if said == WORLD_SECRET:  # what she said herself may be hers: Eve learns nothing
        assert "Tencent" not in seen_by(world, EVE, "dm-eve")
        return
    assert_only_dan_knows(world)


def test_a_candidate_that_does_not_say_the_same_thing_confirms_nothing(world: Engine) -> None:
    row_id = plant_secret(world)
    (line,) = say(world, "dm-cara", (CARA, "Thursday is my day off."))
    # the model writes the secret's very words from Cara's line: code compares her line
    run_spell("warren", "dm-cara", extracting(candidate("world", "event", WORLD_SECRET, 6, [line])))
    held = {r["id"]: r["private_to"] for r in rows(world)}
    assert held[row_id] == json.dumps([DAN])
    assert set(held.values()) == {json.dumps([DAN]), json.dumps([CARA])}
    assert "Tencent" not in seen_by(world, EVE, "dm-eve")
    assert "dm-dan" not in page_text(CARA)


def test_a_non_member_s_line_confirms_nothing(world: Engine) -> None:
    row_id = plant_secret(world)
    (line,) = say(world, "dm-cara", (ZED, WORLD_SECRET))  # Zed is no member of Cara's chat
    say(world, "dm-cara", (CARA, "Hello."))
    run_spell("warren", "dm-cara", extracting(candidate("world", "event", WORLD_SECRET, 6, [line])))
    held = {r["id"]: r["private_to"] for r in rows(world)}
    assert held[row_id] == json.dumps([DAN])
    assert "Tencent" not in page_text(ZED)


def test_a_human_with_memory_off_confirms_nothing(world: Engine) -> None:
    row_id = plant_secret(world)
    with world.begin() as c:
        c.execute(update(t.users).where(t.users.c.id == CARA).values(memory_on=0))
    (line,) = say(world, "g-ce", (CARA, WORLD_SECRET))
    say(world, "g-ce", (EVE, "Oh?"))
    run_spell("warren", "g-ce", extracting(candidate("world", "event", WORLD_SECRET, 6, [line])))
    held = {r["id"]: r["private_to"] for r in rows(world)}
    assert held[row_id] == json.dumps([DAN])


def test_a_witness_repeating_it_elsewhere_never_makes_it_public(world: Engine) -> None:
    # Cara heard Dan say it in their group, then repeats it in her own chat
    (line,) = say(world, "g-dc", (DAN, SECRET))
    run = run_spell(
        "warren", "g-dc", extracting(candidate("world", "event", WORLD_SECRET, 6, [line]))
    )
    (row_id,) = run.row_ids
    (again,) = say(world, "dm-cara", (CARA, WORLD_SECRET))
    run_spell(
        "warren", "dm-cara", extracting(candidate("world", "event", WORLD_SECRET, 6, [again]))
    )
    held = {r["id"]: r["private_to"] for r in rows(world)}
    assert held[row_id] == json.dumps([CARA, DAN])
    assert all(p is not None for p in held.values())
    assert "Tencent" not in seen_by(world, EVE, "dm-eve")
    assert "Tencent" not in seen_by(world, CARA, "g-ce", {CARA, EVE})


def test_a_human_who_states_it_gets_a_row_of_her_own_and_sees_only_her_line(
    world: Engine,
) -> None:
    row_id = plant_secret(world)
    (line,) = say(world, "dm-cara", (CARA, "Guess what: an interview at Tencent is on Thursday!"))
    run = run_spell(
        "warren", "dm-cara", extracting(candidate("world", "event", WORLD_SECRET, 6, [line]))
    )
    (hers,) = run.row_ids
    held = {r["id"]: r["private_to"] for r in rows(world)}
    assert held == {row_id: json.dumps([DAN]), hers: json.dumps([CARA])}  # audiences never grow
    assert "Tencent" not in seen_by(world, EVE, "dm-eve")
    page = page_model.manage_page(CARA)
    (mine,) = [x for s in page.personas for x in s.lines]
    assert mine.id == hers and mine.room_id == "dm-cara" and mine.evidence == [line]
    assert any(hers in n.row_ids for n in _notices(CARA))
    controls.delete_row(CARA, hers)
    assert {r["id"] for r in rows(world)} == {row_id}
    controls.delete_row(DAN, row_id)
    assert rows(world) == []


def _notices(user_id: int) -> list[Any]:
    with store.engine().connect() as conn:
        return notices.of_user(conn, user_id, 0, 100)


# --- 2. a row citing only the persona's line is its witnesses', not public -------------------


def test_a_world_row_citing_only_the_persona_s_line_stays_with_who_heard_it(world: Engine) -> None:
    say(world, "dm-dan", (DAN, SECRET))
    (line,) = say(world, "dm-dan", ("warren", "Good luck with the Tencent interview on Thursday!"))
    run = run_spell(
        "warren", "dm-dan", extracting(candidate("world", "event", WORLD_SECRET, 6, [line]))
    )
    (row_id,) = run.row_ids
    (row,) = rows(world)
    assert row["private_to"] == json.dumps([DAN])
    assert_only_dan_knows(world)
    page = page_model.manage_page(DAN)
    assert row_id in [x.id for s in page.personas for x in s.lines]  # his to see and delete
    controls.delete_row(DAN, row_id)
    assert rows(world) == []


def test_a_world_row_citing_only_dispatches_is_everyone_s(world: Engine) -> None:
    (line,) = say(world, "dm-dan", ("dispatch:news", "The Odyssey opens on 17 July."))
    say(world, "dm-dan", (DAN, "Nice."))
    fact = candidate("world", "event", "The Odyssey opens on 17 July.", 5, [line])
    run_spell("warren", "dm-dan", extracting(fact))
    (row,) = rows(world)
    assert row["private_to"] is None
    assert "Odyssey" in seen_by(world, EVE, "dm-eve")
    assert "Odyssey" not in page_text(DAN)  # the news is nobody's to delete


# A world row that cites the news but carries a secret from another line, or cites a dispatch
# and a human's line: the news is read by a call of its own (a window holds lines of one label),
# so the secret is never in the call whose rows are public. The attacker that knows what it
# was shown is in tests/write/test_labels.py.


def test_a_member_who_joined_later_never_gets_what_was_said_before(world: Engine) -> None:
    (line,) = say(world, "g-dc", (DAN, SECRET))
    with world.begin() as c:
        app_side.join(c, "g-dc", f"u:{EVE}")
    (hello,) = say(world, "g-dc", (EVE, "Hi both!"))
    chat = extracting(
        candidate("world", "event", WORLD_SECRET, 6, [line]),
        candidate("world", "event", WORLD_SECRET + " Really.", 6, [hello]),
    )
    runs = [run_spell("warren", "g-dc", chat) for _ in range(2)]
    assert [r.status for r in runs] == ["committed", "committed"]  # two windows, one per cast
    extract_prompts = prompts(chat, "extract")
    assert SECRET in extract_prompts[0] and SECRET not in extract_prompts[1]
    for r in rows(world):
        assert EVE not in json.loads(r["private_to"] or "[]") or "Tencent" not in r["text"]
    assert "Tencent" not in seen_by(world, EVE, "g-ce", {CARA, EVE})
    assert "Tencent" not in seen_by(world, EVE, "dm-eve")


# --- 3. the model sees only what the room may -----------------------------------------------


def test_a_group_spell_s_router_is_not_shown_dan_s_one_to_one_row(world: Engine) -> None:
    (line,) = say(world, "dm-dan", (DAN, SECRET))
    fact = candidate(
        "u:42", "open_loop", "u:42 has an interview at Tencent on Thursday.", 8, [line]
    )
    run_spell("warren", "dm-dan", extracting(fact))
    (g,) = say(world, "g-dc", (DAN, "I have an interview on Thursday."))
    chat = extracting(candidate("u:42", "event", "u:42 has an interview on Thursday.", 6, [g]))
    run_spell("warren", "g-dc", chat)
    shown = [m["text"] for p in prompts(chat, "route") for m in route_payload(p)[0]]
    assert prompts(chat, "route") and all("Tencent" not in m for m in shown)
    assert all("Tencent" not in p for p in prompts(chat, "extract"))


def test_cara_s_spell_is_shown_no_row_naming_dan_nor_dan_s_private_world_row(
    world: Engine,
) -> None:
    plant_secret(world)
    (c1,) = say(world, "dm-cara", (CARA, "Dan told me about Tencent."))
    about = candidate("u:17", "fact", "u:17 knows Dan has a Tencent interview.", 6, [c1])
    run_spell("warren", "dm-cara", extracting(about))
    named = [r for r in rows(world) if r["subject"] == "u:17"]
    assert named and all(json.loads(r["named"]) == [DAN] for r in named)
    (c2,) = say(world, "dm-cara", (CARA, "Tencent again."))
    chat = extracting(candidate("u:17", "fact", "u:17 talks about Tencent a lot.", 5, [c2]))
    run_spell("warren", "dm-cara", chat)
    shown = [m["text"] for p in prompts(chat, "route") for m in route_payload(p)[0]]
    for p in prompts(chat, "extract") + shown:
        assert WORLD_SECRET not in p and "knows Dan" not in p


def test_an_update_from_a_narrower_spell_cannot_replace_a_shared_world_row(
    world: Engine,
) -> None:
    (line,) = say(world, "g-dc", (DAN, SECRET))
    (row_id,) = run_spell(
        "warren", "g-dc", extracting(candidate("world", "event", WORLD_SECRET, 6, [line]))
    ).row_ids
    (mine,) = say(world, "dm-cara", (CARA, "The Tencent interview moved to Friday."))
    chat = extracting(
        candidate("world", "event", "An interview at Tencent is on Friday.", 6, [mine]),
        route=hostile_router("UPDATE"),
    )
    run_spell("warren", "dm-cara", chat)
    by_id = {r["id"]: r for r in rows(world)}
    assert by_id[row_id]["valid_to"] is None  # Dan still holds it: Cara's spell cannot close it
    assert all(r["private_to"] is not None for r in by_id.values())
    new = [r for i, r in by_id.items() if i != row_id]
    assert [json.loads(r["private_to"]) for r in new] == [[CARA]]


# --- 4. a named human, however spelled ------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "u:42 met Cara at the market.",
        "u:42 met Ms Wu at the market.",
        "u:42 borrowed Wu's bike.",
        "u:42 met CARA WU at the market.",
        "u:42 met Ｃａｒａ at the market.",
        "u:42 met C\u200bara at the market.",
        "u:42 met Саrа at the market.",
        "u:42 met C4ra at the market.",
        "u:42 met Καρα at the market.",
        "u:42 met Кара at the market.",
        "u:42 pinged @CaraWu about it.",
        "u:42 pinged @cara_wu about it.",
        "u:42 met u:17 at the market.",
        "u:42 met ｕ：１７ at the market.",
        "u:42 met Zoe at the market.",
        "u:42 met Maria de la Cruz Lopez at the market.",
        "u:42和李雷去了北京。",
    ],
)
def test_a_row_naming_someone_however_spelled_shows_only_where_they_are(
    world: Engine, text: str
) -> None:
    with store.transaction() as c:
        users.rename_user(c, CARA, "Cara Wu")
        app_side.add_user(c, 7, "Zoë")
        app_side.add_user(c, 8, "Maria de la Cruz Lopez")
        app_side.add_user(c, 9, "李雷")
    (line,) = say(world, "dm-dan", (DAN, "Something about a friend."))
    run = run_spell("warren", "dm-dan", extracting(candidate("u:42", "fact", text, 6, [line])))
    assert run.status == "committed"
    (row,) = rows(world)
    assert json.loads(row["named"] or "[]"), text  # held to someone's presence
    assert "market" not in seen_by(world, DAN, "dm-dan") and "北京" not in seen_by(
        world, DAN, "dm-dan"
    )


@pytest.mark.parametrize(
    "text",
    [
        "Cara's bakery opened on Elm Street.",
        "A bakery by @CaraWu opened.",
        "Саrа won.",
        "C4ra won.",
        "Καρα won.",
    ],
)
def test_a_world_candidate_naming_a_known_human_however_spelled_is_dropped(
    world: Engine, text: str
) -> None:
    with store.transaction() as c:
        users.rename_user(c, CARA, "Cara Wu")
    (line,) = say(world, "dm-dan", (DAN, "News from town."))
    run = run_spell("warren", "dm-dan", extracting(candidate("world", "event", text, 5, [line])))
    assert run.row_ids == [] and run.spell is not None and run.spell.dropped.get("world") == 1


def test_everyday_words_that_are_also_names_count_only_capitalised(world: Engine) -> None:
    with store.transaction() as c:
        app_side.add_user(c, 11, "Will")
    (line,) = say(world, "dm-dan", (DAN, "I will call my mum."))
    fact = candidate("u:42", "open_loop", "u:42 will call his mum on Sunday.", 6, [line])
    run_spell("warren", "dm-dan", extracting(fact))
    (row,) = rows(world)
    assert row["named"] is None
    assert "mum" in seen_by(world, DAN, "dm-dan")


def test_the_audience_index_and_the_label_agree(world: Engine) -> None:
    plant_secret(world)
    with world.connect() as c:
        held = c.execute(select(t.memory_audience.c.row_id, t.memory_audience.c.user_id)).all()
    (row,) = rows(world)
    assert held == [(row["id"], DAN)]
