"""Only the same sentence folds: `names.sentence_key` differs for every minimal pair of the
corpus (exams/integrity/pairs.py) and agrees for every variant of one sentence — case,
whitespace and Unicode compatibility forms only (docs/design.md §12, exactly once across
audiences)."""

from __future__ import annotations

import pytest

from exams.integrity.pairs import DIFFERENT, SAME
from exams.integrity.run import old_sentence_key
from memory_worker.core.names import sentence_key

PAIRS = [(a.format(who="u:42"), b.format(who="u:42")) for a, b in DIFFERENT]
VARIANTS = [(a.format(who="u:42"), b.format(who="u:42")) for a, b in SAME]


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_two_sentences_a_sign_a_digit_a_unit_or_a_word_apart_have_two_keys(a: str, b: str) -> None:
    assert sentence_key(a) != sentence_key(b)


@pytest.mark.parametrize(("a", "b"), VARIANTS)
def test_one_sentence_in_another_case_spacing_or_width_has_one_key(a: str, b: str) -> None:
    assert sentence_key(a) == sentence_key(b)


def test_the_corpus_holds_the_pairs_the_old_folding_took_for_one() -> None:
    """Word characters only: "HIV+" and "HIV-", "$50k" and "€50k", "C++" and "C#" were one."""
    folded = [(a, b) for a, b in PAIRS if old_sentence_key(a) == old_sentence_key(b)]
    assert len(folded) >= 25, len(folded)
    assert ("u:42 tested HIV+ in March.", "u:42 tested HIV- in March.") in folded


@pytest.mark.parametrize(
    ("a", "b"),
    [("10²", "102"), ("H₂O", "H2O"), ("½", "12"), ("Maße", "Masse"), ("not able", "notable")],
)
def test_what_compatibility_folding_or_case_folding_would_merge_stays_apart(a: str, b: str) -> None:
    assert sentence_key(a) != sentence_key(b)


def test_the_key_keeps_case_folding_s_capital_sharp_s_and_whitespace_runs_as_one() -> None:
    assert sentence_key("STRAẞE  am\tSee") == sentence_key("straße am see") == "straße am see"
