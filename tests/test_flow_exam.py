"""The flow exam, small: a hostile random model against the whole write path finds no flow; and
with each structural guard removed in turn, it finds one (`make exam` runs it large). Under the
group scope too (MW_MEMORY_SCOPE=follow), judged by docs/design.md §4's subject-present rule."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from sqlalchemy.engine import Connection

from exams.flow import postgres
from exams.flow import run as flow
from exams.flow.world import Room, World

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def quiet() -> None:
    """The exam says present strangers on purpose; the reader logs each as the app's error."""
    logging.getLogger("memory_worker.reader").setLevel(logging.CRITICAL)


def test_a_hostile_model_moves_no_marker_to_anyone_who_did_not_hear_it(tmp_path: Path) -> None:
    tally = flow.exam(240, seed=1, folder=tmp_path)
    # It did exercise: about half the spells ask the model (the others' lines no model may read:
    # a kit, a switch, a deleted newest line, an echo), and a row comes of every other ask.
    assert tally.spells >= 240 and tally.asked > 100 and tally.rows > 50
    assert tally.flows == [], [str(f) for f in tally.flows[:5]]


@pytest.mark.parametrize("guard", sorted(flow.GUARDS))
def test_the_exam_sees_a_flow_when_a_guard_is_removed(tmp_path: Path, guard: str) -> None:
    template = flow.migrated_template(tmp_path)
    with flow.GUARDS[guard]():
        seen = any(flow.run_world(seed, 40, template, tmp_path).flows for seed in range(1, 11))
    assert seen, f"{guard}: removed, and the exam saw nothing in 10 worlds"


def test_under_the_group_scope_no_marker_reaches_anyone_but_by_a_present_consenting_witness(
    tmp_path: Path,
) -> None:
    tally = flow.exam(120, seed=7, folder=tmp_path, group_scope=True)
    assert tally.spells >= 120 and tally.asked > 40 and tally.rows > 25
    assert tally.flows == [], [str(f) for f in tally.flows[:5]]


# Under the group scope, the guards on what rooms show (the others act on model prompts and
# pages, whose judgement the scope does not change: the runs above cover them).
@pytest.mark.parametrize(
    "guard", ["the call label", "the public-input rule", "the name normaliser", "the consent check"]
)
def test_under_the_group_scope_the_exam_sees_a_flow_when_a_guard_is_removed(
    tmp_path: Path, guard: str
) -> None:
    template = flow.migrated_template(tmp_path)
    with flow.guards(group_scope=True)[guard]():
        seen = any(
            flow.run_world(seed, 40, template, tmp_path, group_scope=True).flows
            for seed in range(1, 11)
        )
    assert seen, f"{guard}: removed, and the exam under the group scope saw nothing in 10 worlds"


@pytest.mark.store
def test_on_postgresql_lines_are_judged_by_the_switches_committed_when_they_were_stored(
    tmp_path: Path,
) -> None:
    """Switches in a transaction left open while lines are stored, committed before or after
    them: the exam's oracle and the store's trigger agree on every line."""
    tally = flow.exam(40, seed=1, folder=tmp_path, database_url=_postgresql())
    assert tally.concurrent > 0 and tally.asked > 5  # it did exercise
    assert tally.flows == [], [str(f) for f in tally.flows[:5]]


@pytest.mark.store
def test_on_postgresql_an_oracle_that_applies_a_switch_before_it_commits_sees_a_flow(
    tmp_path: Path,
) -> None:
    """The run above has teeth: told the wrong rule (a switch applied to the world as soon as
    its transaction changes it, not when it commits), the exam sees lines shown against their
    time — the store stamped them with the switches committed then."""
    pending = postgres.pending_switch

    def eager(world: World, conn: Connection, room: Room) -> Callable[[], None]:
        apply = pending(world, conn, room)
        apply()
        return apply

    template = flow.migrated_template(tmp_path, _postgresql())
    try:
        with mock.patch.object(postgres, "pending_switch", eager):
            seen = any(flow.run_world(seed, 40, template, tmp_path).flows for seed in range(1, 9))
    finally:
        postgres.drop(template)
    assert seen, "the wrong rule, and the exam saw nothing in 8 worlds"


def _postgresql() -> str:
    url = os.environ.get("MW_TEST_DATABASE_URL", "")
    if not url.startswith("postgresql"):
        pytest.skip("PostgreSQL only (MW_TEST_DATABASE_URL): SQLite has one writer")
    return url
