"""The store: migrations build exactly the tables in code, SQLite runs in WAL with a busy
timeout and foreign keys, init-db is safe to run twice, and the writer lock holds."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from memory_worker.core.tables import metadata
from memory_worker.storage import store

pytestmark = pytest.mark.store

ROW = dict(  # a persona_memory row, whatever its content
    persona="warren",
    subject="u:1",
    witnessed="[1]",
    room_id="r",
    kind="fact",
    text="x",
    importance=5,
    evidence="[1]",
    created="2026-08-18",
)


def test_the_migrations_build_exactly_the_tables_in_code(db: Engine) -> None:
    with db.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


def test_init_db_twice_changes_nothing(db: Engine) -> None:
    store.init_db(str(db.url))
    with db.connect() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert version == ScriptDirectory.from_config(store.alembic_config()).get_current_head()


def test_sqlite_runs_in_wal_with_a_busy_timeout_and_foreign_keys(db: Engine) -> None:
    if not store.is_sqlite(db):
        pytest.skip("SQLite pragmas")
    with db.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == store.SQLITE_BUSY_TIMEOUT_MS
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_the_writer_lock_lets_one_writer_in_at_a_time(db: Engine) -> None:
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    def first() -> None:
        with store.writer("warren", str(db.url)):
            order.append("first in")
            first_in.set()
            release.wait(10)
            order.append("first out")

    def second() -> None:
        first_in.wait(10)
        with store.writer("warren", str(db.url)):
            order.append("second in")

    a, b = threading.Thread(target=first), threading.Thread(target=second)
    a.start()
    b.start()
    first_in.wait(10)
    b.join(0.3)  # the second writer is blocked: it has not got in yet
    assert order == ["first in"]
    release.set()
    a.join(10)
    b.join(10)
    assert order == ["first in", "first out", "second in"]


@pytest.mark.processes  # runs the CLI in a process of its own
def test_the_cli_init_db_migrates_the_configured_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    out = subprocess.run(
        [sys.executable, "-m", "memory_worker.cli", "init-db"],
        env={"MW_DATABASE_URL": url, "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "migrated" in out.stdout
    eng = store.engine(url)
    with eng.connect() as conn:
        names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
    assert {"persona_memory", "users", "persona_memory_mute", "rooms", "lines"} <= names


def test_a_transaction_that_reads_then_writes_is_not_beaten_to_the_lock(db: Engine) -> None:
    """Another writer slipping in between our read and our write must wait, not make our
    write fail with "database is locked" (SQLite cannot upgrade a stale read snapshot)."""
    if not store.is_sqlite(db):
        pytest.skip("SQLite locking")
    from memory_worker import app_side

    with store.transaction() as conn:
        app_side.add_user(conn, 1, "Ada")
    outcome: list[str] = []

    def other_writer() -> None:
        import sqlite3

        raw = sqlite3.connect(db.url.database, timeout=0.1)
        try:
            raw.execute("UPDATE users SET name = 'Other' WHERE id = 1")
            raw.commit()
            outcome.append("wrote")
        except sqlite3.OperationalError:
            outcome.append("waited")
        finally:
            raw.close()

    with store.transaction() as conn:
        conn.execute(text("SELECT name FROM users")).all()
        writer_thread = threading.Thread(target=other_writer)
        writer_thread.start()
        writer_thread.join(10)
        conn.execute(text("UPDATE users SET name = 'Ours' WHERE id = 1"))
    assert outcome == ["waited"]
    with db.connect() as conn:
        assert conn.execute(text("SELECT name FROM users")).scalar() == "Ours"


def test_ids_of_deleted_rows_and_notices_are_never_given_again(db: Engine) -> None:
    """Hole 6: a stale toast's undo must never reach a newer row that took a deleted id."""
    from memory_worker.core import tables as t

    note = dict(
        user_id=1,
        persona="warren",
        room_id="r",
        kind="memory_toast",
        text="x",
        row_ids="[]",
        created="2026-08-18",
    )
    with db.begin() as conn:
        first = conn.execute(t.persona_memory.insert().values(**ROW)).inserted_primary_key[0]
        conn.execute(t.persona_memory.delete())
        again = conn.execute(t.persona_memory.insert().values(**ROW)).inserted_primary_key[0]
        n1 = conn.execute(t.notices.insert().values(**note, spell_key="a")).inserted_primary_key[0]
        conn.execute(t.notices.delete())
        n2 = conn.execute(t.notices.insert().values(**note, spell_key="b")).inserted_primary_key[0]
    assert again > first and n2 > n1


def test_a_cursor_that_is_not_an_integer_is_refused_by_the_schema(db: Engine) -> None:
    """Hole 9: SQLite would keep "abc" in an INTEGER column; the CHECK refuses it."""
    from sqlalchemy.exc import DBAPIError

    from memory_worker.core import tables as t

    with pytest.raises(DBAPIError), db.begin() as conn:
        conn.execute(
            t.cursors.insert().values(
                persona="warren", room_id="r", last_line_id="abc", updated="2026-08-18"
            )
        )


def test_every_write_to_a_persona_logs_its_row_under_one_version_and_the_log_keeps_1024(
    db: Engine,
) -> None:
    """The change log (0006) names the row each version changed — insert, update, delete, on
    SQLite and PostgreSQL alike — and prunes itself to the persona's last 1,024 versions."""
    from sqlalchemy import func, select

    from memory_worker.core import tables as t

    pm, ch, v = t.persona_memory.c, t.persona_memory_changes.c, t.persona_memory_versions.c

    def log() -> list[tuple[int, int]]:
        with db.connect() as conn:
            found = conn.execute(select(ch.version, ch.row_id).where(ch.persona == "warren"))
            return sorted((int(a), int(b)) for a, b in found)

    with db.begin() as conn:
        first = conn.execute(t.persona_memory.insert().values(**ROW)).inserted_primary_key[0]
        second = conn.execute(t.persona_memory.insert().values(**ROW)).inserted_primary_key[0]
        conn.execute(t.persona_memory.update().where(pm.id == first).values(recall_count=1))
        conn.execute(t.persona_memory.delete().where(pm.id == second))
        conn.execute(t.persona_memory.insert().values(**{**ROW, "persona": "nolan"}))
    # insert, insert, update, delete: one version each
    assert log() == [(1, first), (2, second), (3, first), (4, second)]
    with db.begin() as conn:
        for n in range(1200):
            conn.execute(t.persona_memory.update().where(pm.id == first).values(recall_count=n))
        version = conn.execute(select(v.version).where(v.persona == "warren")).scalar_one()
        nolan = conn.execute(select(func.count()).where(ch.persona == "nolan")).scalar_one()
    kept = log()
    with db.begin() as conn:  # a row moved to another persona is a change of both
        conn.execute(t.persona_memory.update().where(pm.id == first).values(persona="nolan"))
    assert version == 1204
    assert [k for k, _ in kept] == list(range(version - 1023, version + 1)), "the last 1,024"
    assert nolan == 1, "another persona's log is its own"
    with db.connect() as conn:
        moved = conn.execute(select(ch.persona, ch.row_id).where(ch.version > 1)).all()
    assert ("warren", first) in moved and ("nolan", first) in moved


def test_migrating_cuts_the_quoted_answer_off_reasons_stored_before(db: Engine) -> None:
    """Reasons written before 0008 quoted the model's answer; after the upgrade none does."""
    from alembic import command

    old = (
        "malformed model answer (asked twice): gemini m (extract): the answer does not fit "
        "ExtractAnswer (finish reason FinishReason.STOP): 1 error(s): candidates: Field "
        'required; answer: {"Dan said": "I am pregnant"}'
    )
    cfg = store.alembic_config(str(db.url))
    with db.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
        for line, reason in ((7, old), (8, "model error: 403"), (9, None)):
            conn.execute(
                text(
                    "INSERT INTO spells (persona, room_id, last_line_id, status, reason, created)"
                    " VALUES ('warren', 'r', :line, 'parked', :reason, '2026-12-01')"
                ),
                {"line": line, "reason": reason},
            )
    store.init_db(str(db.url))
    with db.connect() as conn:
        reasons = conn.execute(text("SELECT reason FROM spells ORDER BY last_line_id")).scalars()
        assert list(reasons) == [
            old.split("; answer: ")[0] + "; the answer is not kept",
            "model error: 403",
            None,
        ]


def test_threads_racing_for_a_stores_first_engine_all_get_the_same_one(tmp_path: Path) -> None:
    """Two engines for one store would hold two connection pools, the loser's never closed."""
    racers, extra = 8, 0
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as it can: races show up
    try:
        for i in range(20):
            url = f"sqlite:///{tmp_path / f'race-{i}.db'}"
            start = threading.Barrier(racers)
            got: list[Engine] = []

            def first_use(
                u: str = url, b: threading.Barrier = start, into: list[Engine] = got
            ) -> None:
                b.wait()
                into.append(store.engine(u))

            threads = [threading.Thread(target=first_use) for _ in range(racers)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(10)
            extra += len({id(e) for e in got}) - 1
            store.engine(url).dispose()
    finally:
        sys.setswitchinterval(switch)
    assert extra == 0, f"{extra} engines too many"


def test_migrating_stamps_the_lines_stored_before_and_never_gives_their_ids_again(
    db: Engine,
) -> None:
    """Lines stored before 0021 are stamped with the switches as they are then; a persona's
    line after a muted human's is not readable for the persona muted; ids go on past the
    largest, even once the newest line is deleted."""
    from alembic import command

    from memory_worker import app_side

    cfg = store.alembic_config(str(db.url))
    with db.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0020")
        app_side.add_user(conn, 42, "Dan")
        app_side.add_user(conn, 17, "Cara")
        app_side.add_persona(conn, "warren", "Warren")
        app_side.add_room(conn, "g", "group", ["u:42", "u:17", "warren"])
        conn.execute(text("INSERT INTO persona_memory_mute VALUES (42, 'warren')"))
        dan = app_side.say(conn, "g", 42, "a secret")
        echo = app_side.say(conn, "g", "warren", "so, a secret")
    store.init_db(str(db.url))
    with db.begin() as conn:
        stamped = dict(
            conn.execute(
                text("SELECT line_id, readable FROM line_stamps WHERE persona = 'warren'")
            ).all()
        )
        assert stamped == {dan: 0, echo: 0}
        conn.execute(text(f"DELETE FROM lines WHERE id = {echo}"))
        again = app_side.say(conn, "g", 17, "hello")
    assert again > echo
