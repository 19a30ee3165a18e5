"""The fault harness's full disk (benchmarks/faults.py, the "diskfull" fault), loaded by its
workers at start (this folder on their PYTHONPATH, FAULTS_PAGE_CAP naming a file).

Each SQLite connection, as it is checked out of its pool, is held to the page count the file
says (`PRAGMA max_page_count`, SQLite's own cap on a database's size): "1" caps the store at its
size now — every write that needs a new page fails with "database or disk is full"
(SQLITE_FULL), as on a full disk — and "0" lifts the cap. Portable: no filesystem to mount.
"""

from __future__ import annotations

import os

_CAP_FILE = os.environ.get("FAULTS_PAGE_CAP")
_NO_CAP = 4294967294  # SQLite's largest max_page_count


def _cap(dbapi_conn: object, _record: object, _proxy: object) -> None:
    if type(dbapi_conn).__module__ != "sqlite3" or not _CAP_FILE:
        return
    try:
        with open(_CAP_FILE) as f:
            cap = int(f.read().strip() or 0)
    except (OSError, ValueError):
        cap = 0
    dbapi_conn.execute(f"PRAGMA max_page_count = {cap or _NO_CAP}")  # type: ignore[attr-defined]


if _CAP_FILE:
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    event.listen(Pool, "checkout", _cap)
