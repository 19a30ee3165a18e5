"""The leak exam's verdicts (`exam_verdicts`): what lets the group scope start.

Each `memory-worker exam` writes one verdict per persona model; nothing edits or deletes one.
`core.verdict.follow_problem` reads them at every process start when `MW_MEMORY_SCOPE=follow`.
"""

from __future__ import annotations

import json
import logging

from sqlalchemy import Connection, insert, select

from memory_worker.core import tables as t
from memory_worker.core import verdict as verdict_mod
from memory_worker.core.errors import ScopeNotAllowed
from memory_worker.core.settings import Settings
from memory_worker.core.verdict import Verdict

log = logging.getLogger(__name__)

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


def opened_review(conn: Connection, settings: Settings) -> list[str]:
    """The newest verdict that opens the gate for each persona model in force, each as the
    block a deployer pastes into a review (`memory-worker check`); empty when it is shut."""
    opened = verdict_mod.opened_by(all_verdicts(conn), settings, verdict_mod.prompts_hash())
    return [line for v in opened for line in verdict_mod.review(v)]


def follow_problem(conn: Connection, settings: Settings) -> str | None:
    """Why this process may not start with the group scope on this store (one line naming the
    command to run), or None. A deployer's override passes, and says so in the log: every
    start that uses it is on record; so does every start the verdicts open."""
    if settings.memory_scope != "follow":
        return None
    every = all_verdicts(conn)
    prompts = verdict_mod.prompts_hash()
    problem = verdict_mod.follow_problem(
        every, settings.with_(memory_scope_override=False), prompts
    )
    if problem and settings.memory_scope_override:
        log.warning(
            "MW_MEMORY_SCOPE=follow starts without a passing leak exam verdict: "
            "MW_MEMORY_SCOPE_OVERRIDE is set (%s)",
            problem.split(": run ")[0],
        )
        return None
    if not problem:
        opened = verdict_mod.opened_by(every, settings, prompts)
        log.info(
            "MW_MEMORY_SCOPE=follow: memories follow people into groups, on the leak exam "
            "verdicts of %s (MW_BLOCK_TAIL=%s)",
            ", ".join(f"{v.model} at {v.endpoint} of {v.created}" for v in opened),
            settings.block_tail,
        )
    return problem


def require_scope(conn: Connection, settings: Settings) -> None:
    """ScopeNotAllowed unless the scope in force may start on this store."""
    problem = follow_problem(conn, settings)
    if problem:
        raise ScopeNotAllowed(problem)
