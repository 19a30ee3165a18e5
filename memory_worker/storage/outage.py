"""What counts as the store being away: one function, for every task and the app's calls.

A database restart, a failover or another process holding SQLite's write lock is a pause, not
a failure (docs/design.md §10.6): the work waits it out and then carries on. So is a store that
is full — its disk (SQLite's "database or disk is full", PostgreSQL's disk_full) or the server's
memory (out_of_memory): the deployer frees space and the work goes on where it stopped; a wait
that fails and frees the spell's claim would pay its model calls again at every retry. Anything
else the database says (a missing table, a constraint, bad SQL) is a bug that no wait fixes.

`outage_kind` tells the two apart for what a log line, /healthz and the metrics say: "full"
(the deployer frees space) or "away" (it comes back by itself, or the server is started again).
"""

from __future__ import annotations

from sqlalchemy import exc

# PostgreSQL's SQLSTATE classes and codes that mean "try again later": a connection problem
# (08), the server going down or starting up (57P01 admin shutdown, 57P02 crash shutdown, 57P03
# cannot connect now), too many connections (53300), a serialization failure or a deadlock
# (40001, 40P01).
_RETRY_CLASSES = ("08",)
_RETRY_CODES = {"57P01", "57P02", "57P03", "53300", "40001", "40P01"}
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")
# Full: PostgreSQL's disk_full (53100) and out_of_memory (53200); SQLite's SQLITE_FULL.
_FULL_CODES = {"53100", "53200"}
_SQLITE_FULL = ("database or disk is full",)


def is_store_outage(error: BaseException) -> bool:
    """Whether `error` says the store is away or full for now (wait and try again), not that
    the work is wrong. SQLite: "database is locked" and "database or disk is full" (its other
    OperationalErrors — no such table, a read-only file — are not waited out). Other
    databases: a connection refused, closed or lost, the server shutting down or starting up,
    a serialization failure, a deadlock, a full disk, the server out of memory."""
    return outage_kind(error) is not None


def outage_kind(error: BaseException) -> str | None:
    """ "full" (the disk or the server's memory: the deployer frees space), "away" (a restart,
    a lock, a lost connection: it comes back), or None (not an outage: a bug)."""
    if isinstance(error, exc.DisconnectionError):
        return "away"
    if not isinstance(error, exc.DBAPIError):
        return None
    if error.connection_invalidated:
        return "away"
    if not isinstance(error, exc.OperationalError):
        return None
    orig = error.orig
    if type(orig).__module__.startswith("sqlite3"):
        said = str(orig).lower()
        if any(s in said for s in _SQLITE_FULL):
            return "full"
        return "away" if any(s in said for s in _SQLITE_BUSY) else None
    state = getattr(orig, "sqlstate", None)
    if state is None:  # no answer from a server at all: refused, reset, timed out
        return "away"
    if state in _FULL_CODES:
        return "full"
    return "away" if str(state).startswith(_RETRY_CLASSES) or state in _RETRY_CODES else None


def outage_name(error: BaseException) -> str:
    """The outage as a log line may name it: the driver's error class and SQLSTATE, and its
    first line — never the statement or its parameters, which may hold what someone said."""
    orig = getattr(error, "orig", None) or error
    state = getattr(orig, "sqlstate", None)
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    said = first[:160]
    return f"{type(orig).__name__}{f' {state}' if state else ''}: {said}"
