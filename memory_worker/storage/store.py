"""The store: one engine per process and database, SQLite pragmas, migrations, the writer lock.

SQLite runs in WAL mode with a busy timeout and foreign keys on, so the reader never waits
long on the writer. The same Core code runs on PostgreSQL. Engines are cached per process id:
an engine must never cross a fork (Celery's prefork pool).

A SQLite connection reads the file it opened, even after another file was moved in at its
path (a restore, a store made anew): it would go on serving the old store until the engine is
disposed. So each connection notes its file's (device, inode) at connect, and a checkout
compares them with the path's now (one stat): a different file invalidates the connection and
the pool opens the new one (SQLAlchemy's pessimistic disconnect handling). The old file's
write-ahead log stays behind at the path (SQLite keeps a moved file's log where it is), and a
connection to the new file would read it as its own — the replaced store's rows over the
restored one's. So before a connection is made on a new file, the log the old file left is
removed (`_FileWatch`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, text
from sqlalchemy.engine import make_url

from memory_worker.core import settings as settings_mod

if TYPE_CHECKING:
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_MS = 5_000  # a writer waits this long for the lock before "database is locked"
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schema"  # Alembic's script location

_engines: dict[tuple[str, int], Engine] = {}
_building = threading.Lock()  # a process's first users may race: one engine, not one each


def _on_sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy issue BEGIN itself (see _on_sqlite_begin) so BEGIN IMMEDIATE is possible.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


FileId = tuple[int, int] | None  # (st_dev, st_ino) of a store file; None: no file there


def _file_id(path: str) -> FileId:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


LOG_SUFFIXES = ("-wal", "-shm")  # SQLite's write-ahead log and its index, beside the file


class _FileWatch:
    """The store file a SQLite engine's connections were made on, and the log beside it.

    A file moved in at the path under open connections (a restore by `os.replace`) leaves the
    old file's `-wal` and `-shm` at the path, still held by the pool's connections to the old
    file: SQLite neither checkpoints nor deletes a log whose file has moved. A connection to
    the new file would take that log for its own and read the replaced store's pages over the
    restored one's. So when the path holds another file than the one noted, the log files
    still at the path that are the very ones noted beside the old file (same device and
    inode; a connection to the old file still open keeps those numbers from being reused) are
    removed before the new file is opened.
    """

    def __init__(self, path: str):
        self.path = path
        self._file: FileId = None  # the file the last connection was made on
        self._logs: dict[str, FileId] = {}  # its log files, as they were then
        self._lock = threading.Lock()

    def connected(self, record: Any) -> None:
        """A connection was made (its pragmas run, so the log is open): note its file."""
        with self._lock:
            self._file = record.info["file"] = _file_id(self.path)
            self._logs = {s: _file_id(self.path + s) for s in LOG_SUFFIXES}

    def replaced(self, record: Any) -> bool:
        """Whether this connection's file is no longer the one at the path."""
        return bool(record.info.get("file") != _file_id(self.path))

    def drop_old_log(self) -> None:
        """Before a connection is made: if the path holds another file than the one noted,
        remove the log the old file left there."""
        with self._lock:
            now = _file_id(self.path)
            if self._file is None or now == self._file:
                return
            for suffix, noted in self._logs.items():
                if noted is not None and _file_id(self.path + suffix) == noted:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path + suffix)
            self._file, self._logs = now, {}


def _watch_file(eng: Engine, path: str) -> None:
    """Invalidate a pooled connection whose file is no longer the one at `path`, and open
    none on a new file before the old file's log is gone (`_FileWatch`)."""
    watch = _FileWatch(path)

    @event.listens_for(eng, "do_connect")
    def _before_connect(*_args: Any) -> None:
        watch.drop_old_log()

    @event.listens_for(eng, "connect")
    def _note_file(_dbapi_conn: Any, record: Any) -> None:
        watch.connected(record)

    @event.listens_for(eng, "checkout")
    def _same_file(_dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if watch.replaced(record):
            watch.drop_old_log()  # while this connection still holds the old log open
            raise exc.DisconnectionError("the store file at this path was replaced")


def _on_sqlite_begin(conn: Connection) -> None:
    mode = conn.info.pop("sqlite_begin", "BEGIN")
    conn.exec_driver_sql(mode)


def engine(url: str | None = None) -> Engine:
    """The engine for `url` (default: the configured database), built once per process."""
    url = url or settings_mod.current().database_url
    key = (url, os.getpid())
    eng = _engines.get(key)
    if eng is None:
        with _building:
            eng = _engines.get(key)
            if eng is None:
                eng = _engines[key] = _build_engine(url)
    return eng


def _build_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        eng = create_engine(url, connect_args={"check_same_thread": False, "timeout": 5})
        event.listen(eng, "connect", _on_sqlite_connect)
        event.listen(eng, "begin", _on_sqlite_begin)
        path = make_url(url).database
        if path and path != ":memory:" and not path.startswith("file:"):
            _watch_file(eng, path)
        return eng
    return create_engine(url, pool_pre_ping=True)


def dispose_all() -> None:
    """Drop every cached engine (tests, and a worker child right after fork)."""
    for eng in _engines.values():
        eng.dispose()
    _engines.clear()


def forget_inherited() -> None:
    """In a forked child: drop the parent's engines without closing its connections."""
    for key in [k for k in _engines if k[1] != os.getpid()]:
        _engines.pop(key).dispose(close=False)


def is_sqlite(conn_or_engine: Connection | Engine) -> bool:
    return conn_or_engine.dialect.name == "sqlite"


@contextmanager
def writer(persona: str, url: str | None = None) -> Iterator[Connection]:
    """A write transaction that holds the persona's writer lock from its first statement.

    SQLite: BEGIN IMMEDIATE takes the database's write lock before we read the persona's
    open rows, so "the rows the router saw" cannot change under the commit. PostgreSQL: a
    transaction-scoped advisory lock per persona does the same without blocking others.
    """
    eng = engine(url)
    with eng.connect() as conn:
        if is_sqlite(conn):
            conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"
        with conn.begin():
            if conn.dialect.name == "postgresql":
                lock_id = zlib.crc32(f"persona:{persona}".encode())
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_id})
            yield conn


@contextmanager
def transaction(url: str | None = None) -> Iterator[Connection]:
    """A read-write transaction (notices, controls, events).

    On SQLite it takes the write lock up front (BEGIN IMMEDIATE): a transaction that reads
    and then writes would otherwise fail at once with "database is locked" when another
    writer committed in between, instead of waiting out the busy timeout.
    """
    with engine(url).connect() as conn:
        if is_sqlite(conn):
            conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"
        with conn.begin():
            yield conn


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(SCHEMA_DIR))
    cfg.set_main_option("sqlalchemy.url", url or settings_mod.current().database_url)
    return cfg


def init_db(url: str | None = None) -> None:
    """Apply every migration under schema/ (what `memory-worker init-db` runs)."""
    from alembic import command

    from memory_worker.storage import stamps

    url = url or settings_mod.current().database_url
    cfg = alembic_config(url)
    with engine(url).begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        # The store's trigger stamps lines with this reach (docs/design.md §12).
        stamps.set_echo_reach(conn, settings_mod.current().echo_reach_lines)
