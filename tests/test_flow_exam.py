"""The flow exam, small: a hostile random model against the whole write path finds no flow; and
with each structural guard removed in turn, it finds one (`make exam` runs it large). Under the
group scope too (MW_MEMORY_SCOPE=follow), judged by docs/design.md §4's subject-present rule."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exams.flow import run as flow

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
