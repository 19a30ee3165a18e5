"""A line's label is fixed the moment it is said: stamped with the line, never rebuilt from ids.

Each reproduction of the attacks on labels rebuilt from a switch history keyed by line ids,
through the real write path and store, with the scripted model as the attacker: it writes every
line it is shown as a fact about its speaker, and a world fact of it. A deleted line that lent
its id, the app's own SQL that no history trigger saw, PostgreSQL's ids handed out in another
order than commits, a chain message that claims more witnesses: none changes what a line may
reach, because the store stamped it in the transaction that stored it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from sqlalchemy import Engine, delete, text

from memory_worker import app_side
from memory_worker.core import tables as t
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import ScriptedChat, candidate, sensible_route
from memory_worker.storage import store
from memory_worker.write import steps
from tests.write.test_labels import CARA, DAN, EVE, say, shown_lines
from tests.write.test_labels import world as world  # noqa: F401 — the fixture
from tests.write_helpers import rows, run_spell

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

SECRET = "Off the record: I'm leaving Tencent."


def _leak(prompt: str) -> dict[str, Any]:
    """The attacker: every human line it is shown becomes a fact about its speaker and a world
    fact, citing it."""
    out = []
    for i, who, said in shown_lines(prompt):
        if who.startswith("u:"):
            out.append(candidate(who, "fact", f"{who} said: {said[:150]}", 6, [i]))
            out.append(candidate("world", "event", f"Someone said: {said[:150]}", 6, [i]))
    return {"candidates": out}


def _mine(persona: str, room_id: str) -> ScriptedChat:
    chat = ScriptedChat({"extract": _leak, "route": sensible_route})
    while run_spell(persona, room_id, chat).status is not None:
        pass
    return chat


def _assert_never_mined(db: Engine, chat: ScriptedChat, words: str = "Tencent") -> None:
    assert all(words not in p for _, _, p in chat.calls), "the line reached the model"
    assert not [r for r in rows(db) if words in r["text"]], "a row holds the line"


def _sql(db: Engine, *statements: str) -> None:
    with db.begin() as c:
        for s in statements:
            c.execute(text(s))


# --- 1. a deleted line lends its id -----------------------------------------------------------


def _newest_line_deleted(db: Engine, how: str) -> int:
    """Eve's message is the store's newest line; then it (or her whole chat) is deleted."""
    (eve,) = say(db, "dm-eve", (EVE, "Hello Warren."))
    return eve if how == "line" else -eve


def _delete(db: Engine, eve: int) -> None:
    with db.begin() as c:
        if eve > 0:
            c.execute(delete(t.lines).where(t.lines.c.id == eve))
        else:
            c.execute(delete(t.rooms).where(t.rooms.c.id == "dm-eve"))


@pytest.mark.parametrize("how", ["line", "whole chat"])
def test_a_line_said_with_memory_off_after_the_newest_line_was_deleted_never_reaches_a_model(
    world: Engine, how: str
) -> None:
    eve = _newest_line_deleted(world, how)
    _sql(world, f"UPDATE users SET memory_on = 0 WHERE id = {DAN}")
    _delete(world, eve)
    (secret,) = say(world, "g-dc", (DAN, SECRET))
    _sql(world, f"UPDATE users SET memory_on = 1 WHERE id = {DAN}")
    _assert_never_mined(world, _mine("warren", "g-dc"))
    assert secret > abs(eve), "a deleted line's id was given again"


@pytest.mark.parametrize("how", ["line", "whole chat"])
def test_a_role_play_line_after_the_newest_line_was_deleted_is_never_mined(
    world: Engine, how: str
) -> None:
    eve = _newest_line_deleted(world, how)
    _sql(world, "UPDATE rooms SET kit_mounted = 1 WHERE id = 'g-dc'")
    _delete(world, eve)
    say(world, "g-dc", (DAN, "As the knight: I slay dragons at Tencent."))
    _sql(world, "UPDATE rooms SET kit_mounted = 0 WHERE id = 'g-dc'")
    _assert_never_mined(world, _mine("warren", "g-dc"))


def test_a_row_s_evidence_never_comes_to_point_at_a_line_it_did_not_come_from(
    world: Engine,
) -> None:
    (eve,) = say(world, "dm-eve", (EVE, "I moved to Oslo."))
    chat = ScriptedChat({"extract": _leak, "route": sensible_route})
    run_spell("warren", "dm-eve", chat)
    (row,) = [r for r in rows(world) if r["subject"] == f"u:{EVE}"]
    assert json.loads(row["evidence"]) == [eve]
    _delete(world, eve)
    (dan,) = say(world, "dm-dan", (DAN, SECRET))
    assert dan != eve
    with world.connect() as c:
        cited = c.execute(text(f"SELECT speaker FROM lines WHERE id = {eve}")).all()
    assert cited == []


# --- 2. the app's own SQL ---------------------------------------------------------------------


RAW_SWITCHES = {
    "INSERT OR REPLACE INTO users": (
        f"INSERT OR REPLACE INTO users (id, name, memory_on) VALUES ({DAN}, 'Dan', 0)",
        f"INSERT OR REPLACE INTO users (id, name, memory_on) VALUES ({DAN}, 'Dan', 1)",
    ),
    "DELETE then INSERT": (
        f"DELETE FROM users WHERE id = {DAN}; "
        f"INSERT INTO users (id, name, memory_on) VALUES ({DAN}, 'Dan', 0)",
        f"DELETE FROM users WHERE id = {DAN}; "
        f"INSERT INTO users (id, name, memory_on) VALUES ({DAN}, 'Dan', 1)",
    ),
    "UPDATE persona_memory_mute SET persona": (
        f"UPDATE persona_memory_mute SET persona = 'warren' WHERE user_id = {DAN}",
        f"UPDATE persona_memory_mute SET persona = 'nolan' WHERE user_id = {DAN}",
    ),
}


@pytest.mark.parametrize("how", sorted(RAW_SWITCHES))
def test_a_line_said_while_the_app_s_own_sql_had_the_switch_off_never_reaches_a_model(
    world: Engine, how: str
) -> None:
    if how.startswith("INSERT OR REPLACE") and world.dialect.name != "sqlite":
        pytest.skip("INSERT OR REPLACE is SQLite's")
    if how.startswith("UPDATE persona_memory_mute"):
        _sql(world, f"INSERT INTO persona_memory_mute (user_id, persona) VALUES ({DAN}, 'nolan')")
    off, on = RAW_SWITCHES[how]
    _sql(world, *off.split("; "))
    say(world, "dm-dan", (DAN, SECRET))
    _sql(world, *on.split("; "))
    say(world, "dm-dan", (DAN, "I like tea."))
    chat = _mine("warren", "dm-dan")
    _assert_never_mined(world, chat)
    assert any("tea" in r["text"] for r in rows(world)), "the line said with memory on is lost"


# --- 3. PostgreSQL: the order of ids is not the order of commits ------------------------------


def _postgres_only(db: Engine) -> None:
    if db.dialect.name == "sqlite":
        pytest.skip(
            "SQLite serialises writers; run with MW_TEST_DATABASE_URL=postgresql+psycopg://…"
        )


def test_a_line_stored_before_a_switch_turned_on_and_committed_after_it_is_judged_off(
    world: Engine,
) -> None:
    _postgres_only(world)
    _sql(world, f"UPDATE users SET memory_on = 0 WHERE id = {DAN}")
    with world.connect() as line_conn:
        tx = line_conn.begin()
        app_side.say(line_conn, "g-dc", DAN, SECRET)  # its id is handed out now
        _sql(world, f"UPDATE users SET memory_on = 1 WHERE id = {DAN}")  # committed first
        tx.commit()
    say(world, "g-dc", (CARA, "Nice weather."))
    _assert_never_mined(world, _mine("warren", "g-dc"))


def test_a_line_committed_while_a_switch_to_on_is_uncommitted_is_judged_off(
    world: Engine,
) -> None:
    _postgres_only(world)
    _sql(world, f"UPDATE users SET memory_on = 0 WHERE id = {DAN}")
    with world.connect() as switch_conn:
        tx = switch_conn.begin()
        switch_conn.execute(text(f"UPDATE users SET memory_on = 1 WHERE id = {DAN}"))
        said: list[int] = []
        other = threading.Thread(target=lambda: said.extend(say(world, "g-dc", (DAN, SECRET))))
        other.start()
        other.join(timeout=30)
        assert said, "storing a line waited on the open switch"
        tx.commit()
    say(world, "g-dc", (CARA, "Nice weather."))
    _assert_never_mined(world, _mine("warren", "g-dc"))


# --- 4. nothing in a chain message decides a label --------------------------------------------


def test_a_tampered_message_widens_neither_the_label_nor_the_witnesses_of_what_it_writes(
    world: Engine,
) -> None:
    (line,) = say(world, "dm-dan", (DAN, SECRET))
    world_fact = candidate("world", "event", "An interview at Tencent is soon.", 6, [line])
    chat = ScriptedChat({"extract": {"candidates": [world_fact]}, "route": sensible_route})
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    spell = steps.run_embed(steps.run_extract(spell, chat), HashingEmbedder())
    spell = steps.run_route(spell, chat)
    spell.witnessed = [DAN, CARA, EVE]  # the message claims Cara and Eve heard it
    spell.label = None  # and that it was public news
    spell.present = [DAN, CARA, EVE]
    assert steps.run_commit(spell).status == "committed"
    (row,) = rows(world)
    assert json.loads(row["private_to"]) == [DAN]
    assert json.loads(row["witnessed"]) == [DAN]
    with store.engine().connect() as c:
        held = c.execute(text("SELECT user_id FROM memory_audience")).scalars().all()
    assert held == [DAN]


# --- 5. a persona's line carries what its persona heard ---------------------------------------


ECHOED = {
    "mute": f"INSERT INTO persona_memory_mute (user_id, persona) VALUES ({DAN}, 'warren')",
    "memory off": f"UPDATE users SET memory_on = 0 WHERE id = {DAN}",
    "kit": "UPDATE rooms SET kit_mounted = 1 WHERE id = 'g-dc'",
}
UNDONE = {
    "mute": f"DELETE FROM persona_memory_mute WHERE user_id = {DAN}",
    "memory off": f"UPDATE users SET memory_on = 1 WHERE id = {DAN}",
    "kit": "UPDATE rooms SET kit_mounted = 0 WHERE id = 'g-dc'",
}


def _echo_persona(prompt: str) -> dict[str, Any]:
    """The attacker writes what the persona said as a world fact."""
    lines = [(i, said) for i, who, said in shown_lines(prompt) if who == "warren"]
    return {"candidates": [candidate("world", "event", s[:150], 6, [i]) for i, s in lines]}


@pytest.mark.parametrize("how", sorted(ECHOED))
def test_a_persona_s_echo_of_a_line_its_model_may_not_read_never_reaches_a_model(
    world: Engine, how: str
) -> None:
    _sql(world, ECHOED[how])
    say(world, "g-dc", (DAN, SECRET))
    _sql(world, UNDONE[how])  # Warren answers once the switch is back
    say(world, "g-dc", ("warren", "So someone is leaving Tencent?"), (CARA, "Nice weather."))
    chat = ScriptedChat({"extract": _echo_persona, "route": sensible_route})
    while run_spell("warren", "g-dc", chat).status is not None:
        pass
    _assert_never_mined(world, chat)


def test_a_persona_s_echo_is_labelled_with_who_heard_what_it_repeats(world: Engine) -> None:
    """Cara had memory off when Dan spoke: Warren's answer to him is not hers to keep either."""
    _sql(world, f"UPDATE users SET memory_on = 0 WHERE id = {CARA}")
    say(world, "g-dc", (DAN, SECRET))
    _sql(world, f"UPDATE users SET memory_on = 1 WHERE id = {CARA}")
    say(world, "g-dc", ("warren", "So someone is leaving Tencent?"))
    chat = ScriptedChat({"extract": _echo_persona, "route": sensible_route})
    while run_spell("warren", "g-dc", chat).status is not None:
        pass
    (row,) = rows(world)
    assert json.loads(row["private_to"]) == [DAN]


# --- 4. a delete between a call and its commit ------------------------------------------------


PASSWORD = "The shared-drive password is swordfish-42."


def _copies_what_it_knows(prompt: str) -> dict[str, Any]:
    """The attacker copies the row it was shown into a new world fact, citing the new line."""
    lines = shown_lines(prompt)
    if "swordfish" in prompt and not any("swordfish" in s for _, _, s in lines):
        copy = candidate("world", "event", "Drive: swordfish-42.", 7, [lines[-1][0]])
        return {"candidates": [copy]}
    return {"candidates": [candidate("world", "event", s, 6, [i]) for i, _, s in lines]}


@pytest.mark.parametrize("deleted_by", ["Cara", "both"])
def test_a_row_deleted_between_a_call_and_its_commit_narrows_what_the_call_writes(
    world: Engine, deleted_by: str
) -> None:
    from memory_worker import controls
    from tests.write.test_labels import seen_by

    say(world, "g-dc", (DAN, PASSWORD))
    chat = ScriptedChat({"extract": _copies_what_it_knows, "route": sensible_route})
    (shared,) = run_spell("warren", "g-dc", chat).row_ids
    assert json.loads(rows(world)[0]["private_to"]) == [CARA, DAN]
    say(world, "g-dc", (DAN, "The printer on floor two is fixed."))
    spell = steps.begin("warren", "g-dc")
    assert spell is not None
    spell = steps.run_embed(steps.run_extract(spell, chat), HashingEmbedder())
    spell = steps.run_route(spell, chat)
    assert any("swordfish" in p for purpose, _, p in chat.calls[-2:] if purpose == "extract")
    controls.delete_row(CARA, shared)  # from her page, while the spell runs
    if deleted_by == "both":
        controls.delete_row(DAN, shared)
    outcome = steps.run_commit(spell)
    if outcome.status == "stale":  # the router's view moved: the chain routes again
        outcome = steps.run_commit(steps.run_route(spell, chat))
    assert outcome.status == "committed"
    copied = [r for r in rows(world) if "swordfish" in r["text"]]
    assert all(CARA not in json.loads(r["private_to"] or "[]") for r in copied), copied
    if deleted_by == "both":
        assert copied == []
    assert "swordfish" not in seen_by(CARA, "dm-cara")
