"""The fault harness's full disk (benchmarks/faults.py, the "diskfull" fault), loaded by its
workers at start (this folder on their PYTHONPATH, FAULTS_PAGE_CAP naming a file), and
installed in the harness's own process (`capped`): a full disk is full for the app too.

Each SQLite connection, as it is checked out of its pool, is held to the page count the file
says (`PRAGMA max_page_count`, SQLite's own cap on a database's size): "1" caps the store at its
size now — every write that needs a new page fails with "database or disk is full"
(SQLITE_FULL), as on a full disk — and "0" lifts the cap. Portable: no filesystem to mount.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_NO_CAP = 4294967294  # SQLite's largest max_page_count


def _cap_from(path: str) -> Callable[[Any, Any, Any], None]:
    def cap(dbapi_conn: Any, _record: object, _proxy: object) -> None:
        if type(dbapi_conn).__module__ != "sqlite3":
            return
        try:
            with open(path) as f:
                pages = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pages = 0
        dbapi_conn.execute(f"PRAGMA max_page_count = {pages or _NO_CAP}")

    return cap


@contextmanager
def capped(path: str) -> Iterator[None]:
    """This process's SQLite connections held to the cap in `path` while inside."""
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    cap = _cap_from(path)
    event.listen(Pool, "checkout", cap)
    try:
        yield
    finally:
        event.remove(Pool, "checkout", cap)


if os.environ.get("FAULTS_PAGE_CAP"):
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    event.listen(Pool, "checkout", _cap_from(os.environ["FAULTS_PAGE_CAP"]))
