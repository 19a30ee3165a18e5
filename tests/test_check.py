"""`memory-worker check` says its figures as a person writes them."""

from __future__ import annotations

from memory_worker import check
from memory_worker.core.settings import Settings


def test_the_rate_limits_read_in_plain_numbers_never_an_exponent() -> None:
    said = check._limits(Settings.from_env({})).detail
    assert "600 requests/min" in said and "1,000,000 tokens/min" in said, said
    assert "e+" not in said
    assert [check.plain(x) for x in (0.5, 60.0, 1e6, 2.25)] == ["0.5", "60", "1,000,000", "2.25"]
