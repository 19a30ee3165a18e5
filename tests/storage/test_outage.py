"""Which errors of the database are the store being away (waited out), and which are bugs (not):
real errors from a real SQLite file and a real refused connection."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, exc, text

from memory_worker.storage.outage import is_store_outage, outage_kind, outage_name
from memory_worker.testing.private_postgres import free_port


def error_of(url: str, sql: str, **connect_args: object) -> BaseException:
    eng = create_engine(url, connect_args=connect_args)
    try:
        with eng.begin() as conn:
            conn.execute(text(sql))
    except exc.SQLAlchemyError as e:
        return e
    finally:
        eng.dispose()
    raise AssertionError("no error")


def test_a_sqlite_file_another_process_holds_locked_is_the_store_away(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (said TEXT)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        e = error_of(f"sqlite:///{path}", "INSERT INTO t VALUES ('I keep bees')", timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert is_store_outage(e)
    assert "database is locked" in outage_name(e) and "bees" not in outage_name(e)


def test_a_missing_table_or_a_broken_constraint_is_a_bug_not_an_outage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert not is_store_outage(error_of(url, "SELECT * FROM no_such_table"))
    missing = error_of(url, "CREATE TABLE t (a INTEGER NOT NULL); INSERT INTO t VALUES (NULL)")
    assert not is_store_outage(missing)
    assert not is_store_outage(ValueError("not the database at all"))


def test_a_refused_connection_is_the_store_away_and_named_without_its_statement() -> None:
    url = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/nothing"
    e = error_of(url, "SELECT 'I keep bees'", connect_timeout=2)
    assert isinstance(e, exc.OperationalError)
    assert is_store_outage(e)
    assert "refused" in outage_name(e).lower() and "bees" not in outage_name(e)


@pytest.mark.parametrize("state", ["57P01", "57P03", "40001", "40P01", "08006", "53300"])
def test_a_server_going_down_starting_up_or_a_deadlock_is_the_store_away(state: str) -> None:
    said = psycopg.errors.lookup(state)("the server said so")  # the driver's own class for it
    assert is_store_outage(exc.OperationalError("SELECT 1", {}, said))


def test_another_server_error_is_not_the_store_away() -> None:
    said = psycopg.errors.lookup("42P01")("relation does not exist")
    assert not is_store_outage(exc.OperationalError("SELECT 1", {}, said))


def full_sqlite_error(path: Path) -> BaseException:
    """SQLite's own "database or disk is full": the file held to its size (max_page_count)."""
    eng = create_engine(f"sqlite:///{path}")
    try:
        with eng.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (said BLOB)")
            conn.exec_driver_sql("PRAGMA max_page_count = 2")
            conn.exec_driver_sql("INSERT INTO t VALUES (zeroblob(100000))")
    except exc.SQLAlchemyError as e:
        return e
    finally:
        eng.dispose()
    raise AssertionError("no error")


def test_a_full_sqlite_store_is_an_outage_said_as_full_not_away(tmp_path: Path) -> None:
    e = full_sqlite_error(tmp_path / "full.db")
    assert is_store_outage(e) and outage_kind(e) == "full"
    assert "database or disk is full" in outage_name(e)


@pytest.mark.parametrize("state", ["53100", "53200"])
def test_a_postgresql_disk_full_or_out_of_memory_is_the_store_full(state: str) -> None:
    said = psycopg.errors.lookup(state)("could not extend file")
    assert outage_kind(exc.OperationalError("INSERT", {}, said)) == "full"


def test_a_restart_or_a_lock_is_the_store_away_not_full() -> None:
    said = psycopg.errors.lookup("57P01")("terminating connection")
    assert outage_kind(exc.OperationalError("SELECT 1", {}, said)) == "away"
