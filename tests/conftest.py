"""Shared fixtures: a fresh store per test (a real SQLite file, or the host's PostgreSQL when
MW_TEST_DATABASE_URL is set), with the settings pointed at it."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings
from sqlalchemy import Connection, Engine, create_engine, make_url
from sqlalchemy.pool import NullPool

from memory_worker.core import settings as settings_mod
from memory_worker.core.tables import metadata
from memory_worker.storage import store
from memory_worker.storage.prepared import Prepared

# `make check` draws a quarter of every property test's examples (tests/examples.py).
hypothesis_settings.register_profile("check", max_examples=25)

_OWN_DATABASE: list[tuple[str, str]] = []  # (the URL asked for, the run's own database's name)


def pytest_configure(config: pytest.Config) -> None:
    """With MW_TEST_DATABASE_URL, this run works in a database of its own, made from the URL's
    server and dropped at the end: two runs on one host never empty each other's tables."""
    url = os.environ.get("MW_TEST_DATABASE_URL")
    if not url or not url.startswith("postgresql") or _OWN_DATABASE:
        return
    name = f"mw_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with _admin(url) as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    _OWN_DATABASE.append((url, name))
    own = make_url(url).set(database=name).render_as_string(hide_password=False)
    os.environ["MW_TEST_DATABASE_URL"] = own  # subprocesses the tests start use it too


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _OWN_DATABASE:
        return
    url, name = _OWN_DATABASE.pop()
    os.environ["MW_TEST_DATABASE_URL"] = url
    store.dispose_all()
    with _admin(url) as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _admin(url: str) -> Iterator[Connection]:
    eng = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with eng.connect() as conn:
            yield conn
    finally:
        eng.dispose()


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file built by the real migrations, once per test process: each test's store
    is a copy (a millisecond, against ~45 ms of Alembic for every test that needs a store).
    tests/storage/test_store.py still runs the migrations themselves."""
    path = tmp_path_factory.mktemp("migrated") / "memory.db"
    url = f"sqlite:///{path}"
    store.init_db(url)
    store.engine(url).dispose()
    with sqlite3.connect(path) as conn:  # the WAL folded into the file: a copy holds it all
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def _fresh_database_url(tmp_path: Path, migrated: Path) -> str:
    url = os.environ.get("MW_TEST_DATABASE_URL")
    if not url:
        path = tmp_path / "memory.db"
        shutil.copyfile(migrated, path)
        with sqlite3.connect(path) as conn:  # a store made anew has an id of its own
            conn.execute("UPDATE store_identity SET store_id = ?", (uuid.uuid4().hex,))
        conn.close()
        return f"sqlite:///{path}"
    eng = store.engine(url)
    with eng.begin() as conn:  # start each test from an empty schema
        metadata.drop_all(conn)
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    return url


@pytest.fixture
def db(tmp_path: Path, _migrated_sqlite: Path) -> Iterator[Engine]:
    """A migrated, empty store; `settings.current()` points at it for the test's length."""
    url = _fresh_database_url(tmp_path, _migrated_sqlite)
    before = settings_mod.current()
    # The read cache's sweep is left to the tests that wait for it (test_cache_sweep.py): the
    # others watch the cache change open by open, as "another process" writes in between.
    settings_mod.configure(
        before.with_(database_url=url, state_dir=tmp_path / "state", read_cache_sweep_s=3600.0)
    )
    if url.startswith("postgresql"):
        store.init_db(url)
    try:
        yield store.engine(url)
    finally:
        from memory_worker import reader

        # A touch promised here lands here, not in the next test. The next test's store may
        # reuse this URL (PostgreSQL) with its counters back at zero: a new store, so nothing
        # this process cached of the old one may answer for it.
        reader.close(timeout=30)
        settings_mod.configure(before)
        if not url.startswith("postgresql"):
            store.engine(url).dispose()


@pytest.fixture
def group_scope_measured() -> Iterator[None]:
    """For a test that asks the reader for the group scope (`proven_scope=False`) on its own
    store, which holds no leak exam verdict: the gate lets it start on the override, as it lets
    a deployer (the reader never widens the scope unchecked)."""
    before = settings_mod.current()
    settings_mod.configure(before.with_(memory_scope_override=True))
    try:
        yield
    finally:
        settings_mod.configure(before)


@pytest.fixture(autouse=True)
def _statements_compiled_per_test_under_mutmut() -> None:
    """Under `make mutate` only: forget the statements `Prepared` compiled, so every test
    builds them again. A statement is built once per process, so mutmut would tie a mutant of
    its builder to the first test that happened to build it and run only that test against it
    (docs/mutation.md). Outside mutmut (no MUTANT_UNDER_TEST) this does nothing."""
    if not os.environ.get("MUTANT_UNDER_TEST"):
        return
    for name, module in list(sys.modules.items()):
        if name.startswith("memory_worker.") and module is not None:
            for value in vars(module).values():
                if isinstance(value, Prepared):
                    value._compiled.clear()


# --- a real broker and a real worker --------------------------------------------------------

from memory_worker.testing.gemini_stub import GeminiStub  # noqa: E402
from tests.worker import pipeline, redis_url, worker  # noqa: E402,F401


@pytest.fixture
def gemini_stub() -> Iterator[GeminiStub]:
    """A started stub for one test; stopped (hanging handlers released) afterwards."""
    with GeminiStub() as stub:
        yield stub


@pytest.fixture
def hashing_embedder(db: Engine) -> Iterator[None]:
    """The store embeds with hashing, as `tests.write_helpers.run_spell` does, so recall
    compares vectors of one model."""
    before = settings_mod.current()
    settings_mod.configure(before.with_(embedder="hashing"))
    yield
    settings_mod.configure(before)
