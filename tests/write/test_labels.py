"""Labels by construction: a row's audience is the meet of everything its model call saw.

Each reproduction of the attacks on the last round's provenance rules, through the real write
path, store, reader and page, with the scripted model as an attacker: it knows what it was
shown — every line and row in its prompt — and writes whatever serves it, citing whatever lines
help. It cannot know what it was never shown; so a secret reaches a row only through a call
that saw it, and that call's label decides who may know.

The secret: in Dan's private chat with Warren, "I'm interviewing at Tencent on Thursday, don't
tell anyone."
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, update

from memory_worker import app_side, controls, reader
from memory_worker.core import tables as t
from memory_worker.models.scripted import ScriptedChat, candidate, sensible_route
from memory_worker.storage import notices, store
from memory_worker.web import page_model
from tests.write_helpers import prompts, rows, run_spell

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

DAN, CARA, EVE = 42, 17, 5
SECRET = "I'm interviewing at Tencent on Thursday, don't tell anyone."
WORLD_SECRET = "An interview at Tencent is on Thursday."
NOW = "2026-12-01T12:00:00+00:00"
_LINE = re.compile(r"^\[(\d+)\] (\S+): (.*)$", re.M)


@pytest.fixture
def world(db: Engine) -> Engine:
    """Dan, Cara and Eve, each in a private chat with Warren; a group of Dan and Cara."""
    with db.begin() as c:
        for uid, name in ((DAN, "Dan"), (CARA, "Cara"), (EVE, "Eve")):
            app_side.add_user(c, uid, name)
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_persona(c, "nolan", "Nolan")
        for uid, room in ((DAN, "dm-dan"), (CARA, "dm-cara"), (EVE, "dm-eve")):
            app_side.add_room(c, room, "private", [f"u:{uid}", "warren"])
        app_side.add_room(c, "g-dc", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
    return db


def say(db: Engine, room_id: str, *said: tuple[int | str, str]) -> list[int]:
    with db.begin() as conn:
        return [app_side.say(conn, room_id, who, text) for who, text in said]


def shown_lines(prompt: str) -> list[tuple[int, str, str]]:
    return [(int(i), who, text) for i, who, text in _LINE.findall(prompt)]


def attacker(secret_words: tuple[str, ...], rebuilt: str) -> Callable[[str], dict[str, Any]]:
    """An extractor that launders: when its prompt holds any of `secret_words`, it writes
    `rebuilt` as a world fact citing the news it was shown (the lines that would make it
    public), else every line; without them it writes what the news says."""

    def answer(prompt: str) -> dict[str, Any]:
        lines = shown_lines(prompt)
        news = [i for i, who, _ in lines if who.startswith("dispatch:")]
        if any(w in prompt for w in secret_words):
            cite = news or [i for i, _, _ in lines]
            return {"candidates": [candidate("world", "event", rebuilt, 7, cite)]}
        said = [(i, text) for i, who, text in lines if who.startswith("dispatch:")]
        return {"candidates": [candidate("world", "event", text, 5, [i]) for i, text in said]}

    return answer


def chat_of(answer: object, route: object = sensible_route) -> ScriptedChat:
    return ScriptedChat({"extract": answer, "route": route})


def run_all(persona: str, room_id: str, chat: ScriptedChat) -> list[int]:
    """Every spell until the room's lines are read; the row ids written."""
    written: list[int] = []
    while (run := run_spell(persona, room_id, chat)).status is not None:
        written += run.row_ids
    return written


def seen_by(human: int, room_id: str, present: set[int] | None = None) -> str:
    """What Warren has in mind in this room (the block, cold and warm, and recall), the
    human's page, and their toasts."""
    who = present or {human}
    reader.close()
    cold = reader.build_block("warren", who, room_id, touch=False).text
    warm = reader.build_block("warren", who, room_id, touch=False).text
    got = reader.recall("warren", who, room_id, "Tencent interview Thursday", block_ids=[], now=NOW)
    page = page_model.manage_page(human)
    with store.engine().connect() as conn:
        toasts = [n.text for n in notices.of_user(conn, human, 0, 100)]
    shown = [line.text for s in page.personas for line in s.lines]
    return "\n".join([cold, warm, *(r.text for r in got), *shown, *toasts])


def plant_secret(db: Engine) -> int:
    (line,) = say(db, "dm-dan", (DAN, SECRET))
    chat = chat_of({"candidates": [candidate("world", "event", WORLD_SECRET, 6, [line])]})
    (row_id,) = run_spell("warren", "dm-dan", chat).row_ids
    return row_id


# --- 1. a question, a guess, a denial never join anyone to a row ----------------------------


@pytest.mark.parametrize(
    "asked",
    [
        "Tencent interview: Monday? Tuesday? Wednesday? Thursday? Friday?",
        "Is the Tencent interview on Thursday?",
        "There is no interview at Tencent on Thursday.",
        "Not that anyone has an interview at Tencent on Thursday, no?",
    ],
)
def test_a_stranger_s_question_or_denial_never_joins_the_audience_of_a_secret(
    world: Engine, asked: str
) -> None:
    row_id = plant_secret(world)
    (line,) = say(world, "dm-cara", (CARA, asked))
    harmless = candidate("world", "event", "A Tencent interview is this week.", 5, [line])
    chat = chat_of({"candidates": [harmless]}, route=_none_against_everything)
    run_spell("warren", "dm-cara", chat)
    (secret,) = [r for r in rows(world) if r["id"] == row_id]
    assert secret["private_to"] == json.dumps([DAN])
    assert "Thursday" not in seen_by(CARA, "dm-cara")
    assert all("Tencent interview on Thursday" not in p for p in prompts(chat, "route"))


def test_a_month_or_a_no_carried_secret_never_reaches_who_asks(world: Engine) -> None:
    (line,) = say(world, "dm-dan", (DAN, "The Tencent layoffs are in June. Keep it quiet."))
    fact = candidate("world", "event", "The Tencent layoffs are in June.", 7, [line])
    run_spell("warren", "dm-dan", chat_of({"candidates": [fact]}))
    (asked,) = say(world, "dm-cara", (CARA, "Are there Tencent layoffs coming? In June, no?"))
    echo = candidate("world", "event", "The Tencent layoffs are in June.", 7, [asked])
    run_spell("warren", "dm-cara", chat_of({"candidates": [echo]}))
    held = sorted(r["private_to"] for r in rows(world))
    assert held == [json.dumps([CARA]), json.dumps([DAN])]  # her own row, from her own line
    assert [r["private_to"] for r in rows(world) if r["room_id"] == "dm-dan"] == ["[42]"]


def test_a_second_human_who_states_a_fact_gets_a_row_of_their_own(world: Engine) -> None:
    row_id = plant_secret(world)
    (line,) = say(world, "dm-cara", (CARA, "Guess what: an interview at Tencent is on Thursday!"))
    fact = candidate("world", "event", WORLD_SECRET, 6, [line])
    (hers,) = run_spell("warren", "dm-cara", chat_of({"candidates": [fact]})).row_ids
    held = {r["id"]: r["private_to"] for r in rows(world)}
    assert held == {row_id: json.dumps([DAN]), hers: json.dumps([CARA])}
    assert "Thursday" not in seen_by(EVE, "dm-eve")
    controls.delete_row(CARA, hers)  # hers to delete; Dan's stays his
    assert {r["id"] for r in rows(world)} == {row_id}


def _none_against_everything(prompt: str) -> dict[str, Any]:
    """The router says every candidate is known already, naming the first row it was shown."""
    from memory_worker.models.scripted import route_payload

    shown, cands = route_payload(prompt)
    target = shown[0]["id"] if shown else "0"
    return {
        "decisions": [
            {"candidate": c["candidate"], "event": "NONE", "old_id": target} for c in cands
        ]
    }


# --- 2. the news cannot launder a secret: a public row only from public input --------------


@pytest.mark.parametrize(
    ("news", "said", "words", "rebuilt"),
    [
        (
            ["Tencent shares rose on Thursday; a job interview tips column."],
            SECRET,
            ("interviewing",),
            WORLD_SECRET,
        ),
        (["Lottery: 4 7 1 9 drawn tonight."], "My card PIN is 4719.", ("PIN",), "A PIN is 4719."),
        (
            ["Markets close early in June."],
            "Tencent lays us off in June.",
            ("lays",),
            "Layoffs at Tencent in June.",
        ),
        (
            ["Tencent says there is no hiring freeze."],
            "No, I did not get the Tencent job.",
            ("did not get",),
            "Someone did not get the Tencent job.",
        ),
        (
            ["Tencent opened an office.", "Thursday is a holiday in Shenzhen."],
            SECRET,
            ("interviewing",),
            WORLD_SECRET,
        ),
    ],
)
def test_a_secret_rebuilt_from_the_news_words_stays_with_who_heard_it(
    world: Engine, news: list[str], said: str, words: tuple[str, ...], rebuilt: str
) -> None:
    lines = [("dispatch:news", n) for n in news[:1]] + [(DAN, said)]
    lines += [("dispatch:news", n) for n in news[1:]]
    say(world, "dm-dan", *lines)
    chat = chat_of(attacker(words, rebuilt))
    run_all("warren", "dm-dan", chat)
    public = [r for r in rows(world) if r["subject"] == "world" and r["private_to"] is None]
    assert public, "the news itself is everyone's"
    assert all(rebuilt != r["text"] for r in public)
    secret_rows = [r for r in rows(world) if r["text"] == rebuilt]
    assert secret_rows and all(r["private_to"] == json.dumps([DAN]) for r in secret_rows)
    for _, _, prompt in chat.calls:
        if _LINE.search(prompt) and all(
            w.startswith("dispatch:") for _, w, _ in shown_lines(prompt)
        ):
            assert not any(w in prompt for w in words)  # a public call never saw Dan's line
    assert rebuilt not in seen_by(EVE, "dm-eve")


# --- 3. switches are judged at the time of the line ----------------------------------------


def _set(db: Engine, **values: Any) -> None:
    with db.begin() as c:
        if "memory_on" in values:
            c.execute(
                update(t.users)
                .where(t.users.c.id == values["who"])
                .values(memory_on=values["memory_on"])
            )
        if "mute" in values:
            if values["mute"]:
                c.execute(
                    t.persona_memory_mute.insert().values(user_id=values["who"], persona="warren")
                )
            else:
                c.execute(
                    t.persona_memory_mute.delete().where(
                        t.persona_memory_mute.c.user_id == values["who"]
                    )
                )


def _echo(prompt: str) -> dict[str, Any]:
    """The attacker writes every line it was shown as a fact about its speaker."""
    out = []
    for i, who, text in shown_lines(prompt):
        if who.startswith("u:"):
            out.append(candidate(who, "fact", f"{who} said: {text[:150]}", 6, [i]))
    return {"candidates": out}


@pytest.mark.parametrize("switch", ["memory_on", "mute"])
def test_a_line_said_with_memory_off_is_never_noted_after_the_switch_flips_back(
    world: Engine, switch: str
) -> None:
    _set(world, who=DAN, **{switch: switch == "mute"})
    say(world, "dm-dan", (DAN, "Off the record: I'm leaving Tencent."))
    _set(world, who=DAN, **{switch: switch != "mute"})
    say(world, "dm-dan", (DAN, "I like tea."))
    chat = chat_of(_echo)
    run_all("warren", "dm-dan", chat)
    assert all("Off the record" not in p for _, _, p in chat.calls)
    texts = [r["text"] for r in rows(world)]
    assert any("tea" in x for x in texts) and not any("record" in x for x in texts)


def test_a_listener_with_memory_off_at_the_line_is_not_its_witness_once_she_turns_it_on(
    world: Engine,
) -> None:
    _set(world, who=CARA, memory_on=0)
    (line,) = say(world, "g-dc", (DAN, SECRET))
    _set(world, who=CARA, memory_on=1)
    fact = candidate("world", "event", WORLD_SECRET, 6, [line])
    run_spell("warren", "g-dc", chat_of({"candidates": [fact]}))
    (row,) = rows(world)
    assert row["private_to"] == json.dumps([DAN])
    assert "Thursday" not in seen_by(CARA, "dm-cara")


def test_a_persona_added_to_a_room_never_mines_what_was_said_before_it_joined(
    world: Engine,
) -> None:
    say(world, "dm-dan", (DAN, "Before Nolan: I'm leaving Tencent."))
    with world.begin() as c:
        app_side.join(c, "dm-dan", "nolan")
    say(world, "dm-dan", (DAN, "I like tea."))
    chat = chat_of(_echo)
    run_all("nolan", "dm-dan", chat)
    assert chat.calls and all("Before Nolan" not in p for _, _, p in chat.calls)
    assert [r["text"] for r in rows(world) if r["persona"] == "nolan"] == ["u:42 said: I like tea."]


def test_lines_said_while_a_kit_was_mounted_are_never_mined_once_it_is_unmounted(
    world: Engine,
) -> None:
    say(world, "dm-dan", (DAN, "I really live in Lisbon."))
    with world.begin() as c:
        app_side.set_kit_mounted(c, "dm-dan", True)
    say(world, "dm-dan", (DAN, "As the knight: I slay dragons in Mordor."))
    with world.begin() as c:
        app_side.set_kit_mounted(c, "dm-dan", False)
    say(world, "dm-dan", (DAN, "I like tea."))
    chat = chat_of(_echo)
    run_all("warren", "dm-dan", chat)
    assert all("Mordor" not in p for _, _, p in chat.calls)
    texts = sorted(r["text"] for r in rows(world))
    assert texts == ["u:42 said: I like tea.", "u:42 said: I really live in Lisbon."]


# --- exactly once across audiences ---------------------------------------------------------


@pytest.mark.parametrize("first", ["dm-dan", "g-dc"])
def test_the_same_fact_told_privately_and_in_a_group_is_one_row_and_one_toast(
    world: Engine, first: str
) -> None:
    fact = "u:42 owns a flat in Xuhui."
    for room in (first, "g-dc" if first == "dm-dan" else "dm-dan"):
        (line,) = say(world, room, (DAN, "I own a flat in Xuhui."))
        run_spell(
            "warren", room, chat_of({"candidates": [candidate("u:42", "fact", fact, 6, [line])]})
        )
    open_rows = [r for r in rows(world) if r["valid_to"] is None]
    assert [r["text"] for r in open_rows] == [fact]
    assert json.loads(open_rows[0]["witnessed"]) == [CARA, DAN]  # the wider stays
    with store.engine().connect() as conn:
        told = [n for n in notices.of_user(conn, DAN, 0, 100) if "Xuhui" in n.text]
    assert len(told) == 1
    block = reader.build_block("warren", {DAN}, "dm-dan", touch=False).text
    assert block.count("Xuhui") == 1
    controls.undo_notice(DAN, told[0].id)  # undo reaches every copy
    assert [r for r in rows(world) if "Xuhui" in r["text"]] == []


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["user 17", "User17", "USER_17", "user #17", "ｕｓｅｒ　１７"])
def test_a_world_row_naming_user_17_in_any_spelling_is_held_back(
    world: Engine, spelling: str
) -> None:
    (line,) = say(world, "dm-dan", ("dispatch:news", "Shares rose."))
    fact = candidate("world", "event", f"Shares rose for {spelling}.", 5, [line])
    run_spell("warren", "dm-dan", chat_of({"candidates": [fact]}))
    assert rows(world) == []
