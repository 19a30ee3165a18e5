"""What counts as the store being away: one function, for every task and the app's calls.

A database restart, a failover or another process holding SQLite's write lock is a pause, not
a failure (docs/design.md §10.6): the work waits it out and then carries on. Anything else the
database says (a missing table, a constraint, bad SQL) is a bug that no wait fixes.
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


def is_store_outage(error: BaseException) -> bool:
    """Whether `error` says the store is away for now (wait and try again), not that the work
    is wrong. SQLite: only "database is locked" (its other OperationalErrors — no such table,
    a read-only file — are not waited out). Other databases: a connection refused, closed or
    lost, the server shutting down or starting up, a serialization failure, a deadlock."""
    if isinstance(error, exc.DisconnectionError):
        return True
    if not isinstance(error, exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    if not isinstance(error, exc.OperationalError):
        return False
    orig = error.orig
    if type(orig).__module__.startswith("sqlite3"):
        return any(s in str(orig).lower() for s in _SQLITE_BUSY)
    state = getattr(orig, "sqlstate", None)
    if state is None:  # no answer from a server at all: refused, reset, timed out
        return True
    return str(state).startswith(_RETRY_CLASSES) or state in _RETRY_CODES


def outage_name(error: BaseException) -> str:
    """The outage as a log line may name it: the driver's error class and SQLSTATE, and its
    first line — never the statement or its parameters, which may hold what someone said."""
    orig = getattr(error, "orig", None) or error
    state = getattr(orig, "sqlstate", None)
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    said = first[:160]
    return f"{type(orig).__name__}{f' {state}' if state else ''}: {said}"
