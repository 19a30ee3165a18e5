"""The leak exam's verdicts (`exam_verdicts`): what lets the group scope start.

Each `memory-worker exam` writes one verdict per persona model; nothing edits or deletes one.
`core.verdict.follow_problem` reads them at every process start when `MW_MEMORY_SCOPE=follow`.
"""

from __future__ import annotations

import json

from sqlalchemy import Connection, insert, select

from memory_worker.core import tables as t
from memory_worker.core.verdict import Verdict

v = t.exam_verdicts.c


def record(conn: Connection, verdict: Verdict) -> int:
    found = conn.execute(
        insert(t.exam_verdicts)
        .values(
            created=verdict.created,
            model=verdict.model,
            passed=int(verdict.passed),
            record=json.dumps(verdict.to_json(), sort_keys=True),
        )
        .returning(v.id)
    )
    return int(found.scalar_one())


def all_verdicts(conn: Connection) -> list[Verdict]:
    """Every verdict, oldest first."""
    rows = conn.execute(select(v.record).order_by(v.id)).scalars()
    return [Verdict.from_json(json.loads(r)) for r in rows]
