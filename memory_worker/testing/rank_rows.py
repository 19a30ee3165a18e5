"""Rows already in hand → the ranking's columns, in plain Python.

The reader builds the same `RankColumns` in SQL (whom a row concerns, its kind code, its age)
and never uses this module; the ranking's tests and the LoCoMo benchmarks rank Row objects
through it. `test_the_python_columns_rank_exactly_as_the_reader_does` proves the two agree, so
every rule tested or measured over these columns is the rule a room open runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from memory_worker.core.constants import BLOCK_CHARS_LIMIT, SUBJECT_WORLD, TAKE_PER_HUMAN
from memory_worker.core.ranking import (
    UNREADABLE_AGE_DAYS,
    WORLD_GROUP,
    RankColumns,
    kind_code,
    scores,
    take,
)
from memory_worker.core.rows import Row, concerns
from memory_worker.core.vectors import cosines


def group(row: Row) -> int:
    """WORLD_GROUP, or the human the row concerns (`rows.concerns`)."""
    if row.subject == SUBJECT_WORLD:
        return WORLD_GROUP
    uid = concerns(row.subject, row.counterpart)
    if uid is None:
        raise ValueError(f"row {row.id} is about no human: subject={row.subject!r}")
    return uid


def age_days(stamp: str, now: datetime) -> float:
    """Days from an ISO stamp (naive means UTC) to `now`, never negative; unreadable: old."""
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return UNREADABLE_AGE_DAYS
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return max((now - when).total_seconds() / 86400.0, 0.0)


def columns(rows: Sequence[Row], now: datetime, topic: bytes | None = None) -> RankColumns:
    """The rows as the ranking's columns, relevance measured against `topic` (0 without)."""
    n = len(rows)
    relevance = np.zeros(n)
    if topic is not None and n:
        relevance = cosines([r.embedding for r in rows], topic)
    return RankColumns(
        ids=np.array([r.id for r in rows], dtype=np.int64),
        groups=np.array([group(r) for r in rows], dtype=np.int64),
        kinds=np.array([kind_code(r.kind) for r in rows], dtype=np.int64),
        importance=np.array([r.importance for r in rows], dtype=np.float64),
        age_days=np.array([age_days(r.last_recalled or r.created, now) for r in rows]),
        chars=np.array([len(r.text) for r in rows], dtype=np.int64),
        relevance=relevance,
    )


def pick(
    rows: Sequence[Row],
    now: datetime,
    topic: bytes | None = None,
    *,
    per_human: int = TAKE_PER_HUMAN,
    chars_limit: int = BLOCK_CHARS_LIMIT,
) -> dict[int, list[Row]]:
    """Score and take over Row objects: the rule the reader runs on its columns."""
    c = columns(rows, now, topic)
    got = take(c, scores(c), per_human=per_human, chars_limit=chars_limit)
    by_id = {r.id: r for r in rows}
    return {g: [by_id[i] for i in ids] for g, ids in got.items()}
