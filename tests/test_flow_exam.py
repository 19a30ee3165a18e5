"""The flow exam, small: a hostile random model against the whole write path finds no flow;
and with each structural guard removed in turn, it finds one (`make exam` runs it large)."""

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
    tally = flow.exam(400, seed=1, folder=tmp_path)
    assert tally.spells >= 400 and tally.asked > 200 and tally.rows > 100  # it did exercise
    assert tally.flows == [], [str(f) for f in tally.flows[:5]]


@pytest.mark.parametrize("guard", sorted(flow.GUARDS))
def test_the_exam_sees_a_flow_when_a_guard_is_removed(tmp_path: Path, guard: str) -> None:
    template = flow.migrated_template(tmp_path)
    with flow.GUARDS[guard]():
        seen = any(flow.run_world(seed, 40, template, tmp_path).flows for seed in range(1, 11))
    assert seen, f"{guard}: removed, and the exam saw nothing in 10 worlds"
