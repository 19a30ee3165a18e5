"""The write path's clock. `MW_TODAY` pins the date (the demo's cassette keys on prompts that
hold today's date); the time of day stays real so ordering by `created` still works."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_worker.core import settings as settings_mod
from memory_worker.core.rows import now_iso


def today() -> str:
    return settings_mod.current().today or now_iso()[:10]


def now() -> str:
    pinned = settings_mod.current().today
    real = now_iso()
    return f"{pinned}{real[10:]}" if pinned else real


def as_datetime(at: datetime | str | None) -> datetime:
    """The moment an open or a recall counts recency from: `at` (naive means UTC), else the
    store's clock (`now()`)."""
    when = datetime.fromisoformat(at or now()) if not isinstance(at, datetime) else at
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
