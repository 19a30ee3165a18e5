"""The integrity exam, small: minimal pairs through ADD, UPDATE, the fold across audiences and
the deletes lose no fact and fold none into another; with the old folding (word characters
only) in place of `names.sentence_key`, it sees wrong folds (`make exam` runs it whole)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exams.integrity import run as integrity

pytestmark = pytest.mark.slow


def test_no_fact_is_lost_or_folded_into_another(tmp_path: Path) -> None:
    tally = integrity.exam(tmp_path, only=4)
    assert tally.cases == 4 * 2 * len(integrity.PATHS)  # it did run every path, both kinds
    assert tally.failures == 0, integrity.report(tally, 0)


def test_the_exam_sees_wrong_folds_when_the_old_folding_is_put_back(tmp_path: Path) -> None:
    with integrity.old_folding():
        tally = integrity.exam(tmp_path, only=2)
    assert tally.folded and tally.lost, integrity.report(tally, 0)
