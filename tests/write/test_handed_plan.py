"""The plan a spell carries is an upper bound the commit checks, never trusts
(`write/commit_checks.py`, docs/design.md §2.4).

Each test routes a real spell (Dan and Cara's group, a scripted model), tampers with the plan
its message carries, and commits it: what is written is never wider than the facts under the
writer lock allow — no wider audience, no close of a row the router was not shown, no row
over today's cap — and a spell that carries no plan is routed again, never applied blind.
"""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from exams.integrity import run as integrity
from memory_worker import app_side
from memory_worker.core import labels
from memory_worker.core.constants import DAILY_CAP_PER_HUMAN
from memory_worker.core.errors import MalformedMessage
from memory_worker.core.rows import Spell
from memory_worker.models.scripted import ScriptedChat, candidate
from memory_worker.storage import spell_views, store
from memory_worker.write import commit, steps
from memory_worker.write.plan import Plan

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("hashing_embedder")]

DAN, CARA = integrity.DAN, integrity.CARA
REGATTA = "The regatta is on Sunday."
BOAT = "u:42 owns a red boat."
PRIVATE = "u:42 is saving for a bigger boat."  # Dan's own chat: never in the group's view
BAKERY = "Bakeries close at noon."  # the group's world row: no word of the regatta


@pytest.fixture
def world(db: Engine) -> Engine:
    integrity.build()
    return db


def routed(room: str, *cands: tuple[str, str, str]) -> Spell:
    """Dan says a line in `room`; the model proposes `cands` (subject, kind, text); the router
    ADDs each. The spell as the route step hands it to the commit."""
    with store.transaction() as conn:
        line = app_side.say(conn, room, DAN, "Sundays I sail.")
    extract = {"candidates": [candidate(s, k, t, 6, [line]) for s, k, t in cands]}
    chat = ScriptedChat({"extract": extract, "route": lambda _p: _adds(len(cands))})
    spell = steps.begin("warren", room)
    assert spell is not None
    spell = steps.run_embed(steps.run_extract(spell, chat), integrity.EMBEDDER)
    routed_spell = steps.run_route(spell, chat)
    assert routed_spell.plan is not None, "the route step hands on a plan"
    return routed_spell


def _adds(n: int) -> dict[str, Any]:
    return {"decisions": [{"candidate": i, "event": "ADD"} for i in range(n)]}


def tampered(spell: Spell, **step: Any) -> Spell:
    """The spell with every step of its plan changed as `step` says, through its message."""
    message = spell.to_json()
    for s in message["plan"]["steps"]:
        s.update(step)
    return Spell.from_json(message)


def test_a_plan_that_says_public_writes_the_world_row_for_the_group_alone(world: Engine) -> None:
    spell = tampered(routed("g-dc", ("world", "event", REGATTA)), audience=None)
    assert spell.plan is not None and spell.plan["steps"][0]["audience"] is None
    assert steps.run_commit(spell).status == "committed"
    row = integrity.row_of(REGATTA)
    assert row["valid_to"] is None and json.loads(row["private_to"]) == [CARA, DAN]


def test_a_plan_that_closes_a_row_the_router_was_not_shown_closes_nothing(world: Engine) -> None:
    integrity.write("dm-dan", "u:42", PRIVATE)
    private = integrity.row_of(PRIVATE)["id"]
    spell = tampered(routed("g-dc", ("u:42", "fact", BOAT)), event="CLOSE", old_row_id=private)
    assert steps.run_commit(spell).status == "committed"
    assert integrity.row_of(PRIVATE)["valid_to"] is None, "Dan's private row stays open"


def test_a_plan_that_closes_a_row_in_the_router_s_view_it_was_not_shown_closes_nothing(
    world: Engine,
) -> None:
    """The group's world row is in the router's view, open, of the same concern and audience,
    as a CLOSE needs — but never among its neighbours: the store's note of what the router was
    shown decides, not the plan."""
    integrity.write("g-dc", "world", BAKERY)
    bakery = integrity.row_of(BAKERY)["id"]
    spell = routed("g-dc", ("world", "event", REGATTA))
    with store.engine().connect() as conn:
        assert bakery not in spell_views.router_saw(conn, spell), "not a neighbour: never shown"
    spell = tampered(spell, event="CLOSE", old_row_id=bakery)
    assert steps.run_commit(spell).status == "committed"
    assert integrity.row_of(BAKERY)["valid_to"] is None, "the bakery row stays open"


def test_a_plan_of_more_rows_than_today_s_cap_writes_the_cap(world: Engine) -> None:
    spell = routed("g-dc", ("u:42", "fact", BOAT))
    more = DAILY_CAP_PER_HUMAN + 3
    message = spell.to_json()
    (c,) = message["candidates"]
    message["candidates"] = [{**c, "text": f"u:42 owns {n + 2} red boats."} for n in range(more)]
    (step,) = message["plan"]["steps"]
    message["plan"]["steps"] = [{**step, "candidate": n, "capped": True} for n in range(more)]
    outcome = steps.run_commit(Spell.from_json(message))
    assert outcome.status == "committed" and len(outcome.row_ids) == DAILY_CAP_PER_HUMAN
    assert len(integrity.rows()) == DAILY_CAP_PER_HUMAN


def test_a_step_the_route_put_over_the_cap_stays_over_it(world: Engine) -> None:
    """The bound holds the other way too: a step marked over the cap is not written, however
    much room the cap has now."""
    spell = tampered(routed("g-dc", ("u:42", "fact", BOAT)), capped=False)
    outcome = steps.run_commit(spell)
    assert outcome.status == "committed" and outcome.row_ids == [] and integrity.rows() == []


def test_a_spell_without_its_plan_is_routed_again_never_applied_blind(world: Engine) -> None:
    spell = routed("g-dc", ("u:42", "fact", BOAT))
    planless = replace(spell, plan=None)  # sent by a version before the plan, or stripped
    assert steps.run_commit(planless).status == "stale"
    assert integrity.rows() == []
    chat = ScriptedChat({"route": lambda _p: _adds(1)})
    again = steps.run_route(planless, chat)
    assert steps.run_commit(again).status == "committed"
    assert [r["text"] for r in integrity.rows()] == [BOAT]


@pytest.mark.parametrize(
    "step",
    [
        {"candidate": 5, "event": "ADD"},  # a candidate the spell does not carry
        {"candidate": 0, "event": "DELETE"},
        {"candidate": 0, "event": "ADD", "audience": ["u:42"]},
        {"candidate": 0, "event": "ADD", "capped": "yes"},
    ],
)
def test_a_malformed_plan_is_refused_naming_fields_not_values(step: dict[str, Any]) -> None:
    spell = Spell("warren", "g-dc", 3, 9, candidates=[candidate("u:42", "fact", BOAT, 6, [4])])
    message = {**spell.to_json(), "plan": {"steps": [step]}}
    with pytest.raises(MalformedMessage) as e:
        Spell.from_json(message)
    assert "plan" in str(e.value) and "u:42" not in str(e.value) and "yes" not in str(e.value)


def test_the_commit_reads_what_it_checks_in_one_module_and_runs_no_other_step_s_rule() -> None:
    """Of the write steps, the commit imports its guard module and the plan's types alone."""
    tree = ast.parse(Path(commit.__file__).read_text())
    imported = {
        f"{node.module}.{alias.name}" if node.module == "memory_worker.write" else node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    write = {m for m in imported if m.startswith("memory_worker.write")}
    assert write == {"memory_worker.write.commit_checks", "memory_worker.write.plan"}


def test_a_step_that_names_no_audience_bounds_its_row_to_nobody() -> None:
    """A plan read from JSON missing a step's audience (or the plan's label) reads as nobody,
    never as public: the bound stays the narrowest."""
    got = Plan.from_json({"steps": [{"candidate": 0, "event": "ADD"}]})
    assert got.label == labels.NOBODY and got.steps[0].audience == labels.NOBODY
    assert not got.steps[0].writes
