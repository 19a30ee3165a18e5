"""How many examples a property test draws: all of them under `make test` (CI), a quarter under
`make check`, the inner loop, whose time CONTRIBUTING promises (`--hypothesis-profile=check`,
registered in tests/conftest.py). A test asks `examples(n)` where it would say
`max_examples=n`; a test that says nothing draws the profile's default (100, or 25)."""

from __future__ import annotations

from hypothesis import settings

HYPOTHESIS_DEFAULT = 100  # Hypothesis's own max_examples, the full profile's
FEWEST = 10  # below this a property test stops being one


def examples(n: int) -> int:
    """`n`, scaled by the profile in force: the full suite's `n`, the check's quarter."""
    share = settings.default.max_examples / HYPOTHESIS_DEFAULT
    return max(FEWEST, round(n * share))
