"""docs/architecture.md's walk of a commit is the one the code makes: traced, stop by stop.

The spell is a group's (Dan and Cara with Warren): an ADD about Dan that folds the narrower
copy his private chat wrote, an UPDATE of the group's world row, and a second ADD. A change
that adds a stop, or sends the commit back into a module once more, fails here until the doc
shows it (and says whether the calls still go down)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

from exams.integrity import run as integrity
from memory_worker import app_side
from memory_worker.core.rows import Spell
from memory_worker.models.scripted import ScriptedChat, candidate, route_payload
from memory_worker.storage import store
from memory_worker.write import steps
from tests.reader.walk import Stop, Walk, documented, walk

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

HEADER = "### The stops of a commit"
WATCHED = ("memory_worker.write", "memory_worker.storage")

SAILS = "u:42 sails on Sundays."  # said in Dan's private chat first: the copy that folds
SATURDAY, SUNDAY = "The regatta is on Saturday.", "The regatta is on Sunday."
BOAT = "u:42 owns a red boat."


def stops(traced: Walk) -> list[Stop]:
    """The walk's stops but the statement builders `storage.prepared` calls back (once per
    process and IN-list shape: whether a test before this one built them is no part of it)."""
    return [s for s in traced.stops if s.caller != "storage.prepared"]


def route(prompt: str) -> dict[str, Any]:
    """The regatta's news UPDATEs the row it was shown; every other candidate is an ADD."""
    shown, cands = route_payload(prompt)
    saturday = next((m["id"] for m in shown if m["text"] == SATURDAY), None)
    return {
        "decisions": [
            {"candidate": c["candidate"], "event": "UPDATE", "old_id": saturday}
            if c["text"] == SUNDAY
            else {"candidate": c["candidate"], "event": "ADD"}
            for c in cands
        ]
    }


def routed_spell() -> Spell:
    """The group's spell, routed: ADD (folding Dan's private copy), UPDATE, ADD."""
    integrity.build()
    integrity.write("dm-dan", "u:42", SAILS)
    integrity.write("g-dc", "world", SATURDAY)
    with store.transaction() as conn:
        line = app_side.say(conn, "g-dc", integrity.DAN, "Sundays I sail; the regatta moved.")
    extract = {
        "candidates": [
            candidate("u:42", "fact", SAILS, 6, [line]),
            candidate("world", "event", SUNDAY, 6, [line]),
            candidate("u:42", "fact", BOAT, 5, [line]),
        ]
    }
    chat = ScriptedChat({"extract": extract, "route": route})
    spell = steps.begin("warren", "g-dc")
    assert spell is not None
    spell = steps.run_extract(spell, chat)
    return steps.run_route(steps.run_embed(spell, integrity.EMBEDDER), chat)


def test_the_docs_walk_of_a_commit_is_the_codes(db: Engine) -> None:
    spell = routed_spell()
    outcome: list[Any] = []
    traced = walk(lambda: outcome.append(steps.run_commit(spell)), WATCHED)
    (done,) = outcome
    assert done.status == "committed" and len(done.row_ids) == 3 and len(done.closed_ids) == 2
    shown = [f"{s.caller or '-'} → {s}" for s in stops(traced)]
    redo = "redo the walk in docs/architecture.md:\n" + "\n".join(shown)
    assert shown == documented(HEADER), redo


def test_the_commit_calls_its_checks_once_and_nothing_below_calls_it_back(db: Engine) -> None:
    """Calls go down: commit → commit_checks → the rest; the plan is made in one call."""
    spell = routed_spell()
    traced = walk(lambda: steps.run_commit(spell), WATCHED)
    into = [(s.caller, s.module, s.function) for s in stops(traced)]
    assert [f for c, m, f in into if m == "write.commit_checks"] == ["check"]
    assert [f for c, m, f in into if c == "write.commit_checks" and m == "write.plan"][-1] == "make"
    assert not [c for c, m, _ in into if m == "write.commit" and c != "write.steps"]
    assert {m for c, m, _ in into if c == "write.commit"} <= {"write.commit_checks"} | {
        m for _, m, _ in into if m.startswith("storage.")
    }
