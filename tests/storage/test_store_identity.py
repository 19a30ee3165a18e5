"""A store has an identity (docs/design.md §3.2): what a process cached of one store never
answers for another at the same url — a store restored from a backup (its counters above,
equal to or below the process's), dropped and migrated again in place, or a SQLite file
replaced by a new one at the same path. Each would otherwise render a row about Cara under
Dan's header: the cache groups rows by whom they concern, and the row at that id changed."""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

import pytest
from sqlalchemy import Engine, delete, event, insert, select, update

from memory_worker import app_side, reader
from memory_worker.core import tables as t
from memory_worker.core.block import Block
from memory_worker.core.tables import metadata
from memory_worker.reader import build_block, cache_loader, fill
from memory_worker.storage import store

pytestmark = [pytest.mark.store, pytest.mark.usefixtures("group_scope_measured")]

NOW = "2026-12-01T12:00:00+00:00"
DAN, CARA = 42, 17
ROW_ID, WORLD_ID = 7, 8  # explicit ids: the backup's Cara row takes the id Dan's row has live
DANS = "Dan is training for the Shanghai marathon."
CARAS = "Cara is pregnant."
Dump = dict[str, list[dict[str, Any]]]


def the_group(eng: Engine) -> None:
    """Group room g: Dan, Cara and Warren; no rows yet."""
    with eng.begin() as c:
        app_side.add_user(c, DAN, "Dan")
        app_side.add_user(c, CARA, "Cara")
        app_side.add_persona(c, "warren", "Warren")
        app_side.add_room(c, "g", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])


def row(row_id: int, subject: str, text: str) -> dict[str, Any]:
    return {
        "id": row_id,
        "persona": "warren",
        "subject": subject,
        "counterpart": None,
        "witnessed": json.dumps([DAN, CARA]),
        "room_id": "g",
        "kind": "fact",
        "text": text,
        "importance": 8,
        "evidence": "[1]",
        "created": "2026-11-20T10:00:00+00:00",
    }


def write(eng: Engine, *rows: dict[str, Any], updates: int = 0) -> None:
    """Insert these rows, then bump the world row `updates` times (its importance)."""
    with eng.begin() as c:
        for r in rows:
            c.execute(insert(t.persona_memory).values(**r))
        for n in range(updates):
            c.execute(
                update(t.persona_memory)
                .where(t.persona_memory.c.id == WORLD_ID)
                .values(importance=5 + n % 3)
            )


def dump(eng: Engine) -> Dump:
    """A backup: every table's rows (the counters, the change log and the store's id too)."""
    with eng.connect() as c:
        return {
            tab.name: [dict(m) for m in c.execute(select(tab)).mappings()]
            for tab in metadata.sorted_tables
        }


def restore(eng: Engine, backup: Dump) -> None:
    """The backup put back under the running app, in one transaction, the counters and the log
    last (the rows' own inserts bump them on the way)."""
    counters = {
        t.persona_memory_versions.name,
        t.persona_memory_changes.name,
        t.persona_memory_counts.name,  # the page's, kept by triggers too
    }
    with eng.begin() as c:
        for tab in reversed(metadata.sorted_tables):
            c.execute(delete(tab))
        for tab in metadata.sorted_tables:
            if tab.name not in counters and backup[tab.name]:
                c.execute(insert(tab), backup[tab.name])
        for name in counters:
            c.execute(delete(metadata.tables[name]))
            if backup[name]:
                c.execute(insert(metadata.tables[name]), backup[name])


def warrens_block() -> Block:
    """Warren's block in the group, its cold open's fill landed (what the process holds)."""
    block = build_block("warren", {DAN, CARA}, "g", now=NOW, touch=False, proven_scope=False)
    assert fill.FILLS.wait(30)
    return block


def misfiled(eng: Engine, block: Block) -> list[tuple[str, int, str]]:
    """Rows the block lists under a human's header that the store says are about someone else."""
    ids = [i for ids in block.row_ids_by_human.values() for i in ids]
    with eng.connect() as c:
        subject = dict(
            c.execute(
                select(t.persona_memory.c.id, t.persona_memory.c.subject).where(
                    t.persona_memory.c.id.in_(ids)
                )
            ).all()
        )
    return [
        (header, i, subject[i])
        for header, got in block.row_ids_by_human.items()
        if header != "world"
        for i in got
        if subject.get(i) != header
    ]


def dans_section(block: Block) -> str:
    """The lines under Dan's header."""
    text = block.text
    start = text.index("Dan (u:42)")
    return text[start : text.index("\n\n", start)]


def assert_told_right(eng: Engine, block: Block) -> None:
    assert not misfiled(eng, block), "a row about someone else under a human's header"
    if "Dan (u:42)" in block.text:
        assert CARAS not in dans_section(block), "Cara's news under Dan's header"
    cache_loader.READ_CACHE.clear()
    assert block.text == warrens_block().text, "the block a fresh process builds"


# (the backup's writes after Cara's row, the live writes after Dan's row, one more write to
# the restored store): the counters the process holds vs. the backup's.
CASES = {
    "above": (1, 0, False),  # process at 1, backup at 3: the log past 1 names the world row only
    "equal": (0, 1, False),  # both at 2
    "below": (0, 2, False),  # process at 3, backup at 2
    "below, then a write brings it level": (0, 2, True),  # process at 3, store 2 then 3
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("first", ["open", "sweep"])
def test_a_store_restored_under_a_running_app_never_files_caras_row_under_dan(
    db: Engine, case: str, first: str
) -> None:
    backup_updates, live_updates, level = CASES[case]
    the_group(db)
    world = row(WORLD_ID, "world", "The Bund is lit until 11 pm.")
    base = dump(db)
    write(db, row(ROW_ID, f"u:{CARA}", CARAS), world, updates=backup_updates)
    backup = dump(db)  # the same store (same id) with another history: Cara's row at id 7
    restore(db, base)
    write(db, row(ROW_ID, f"u:{DAN}", DANS), *([world] if live_updates else []))
    if live_updates > 1:
        write(db, updates=live_updates - 1)
    before = warrens_block()
    assert DANS in dans_section(before), "the process holds Dan's row under his header"

    restore(db, backup)
    if level:
        write(db, row(WORLD_ID + 1, "world", "The ferry to Pudong runs every 15 minutes."))
    if first == "sweep":
        reader.catch_up()
    after = warrens_block()
    assert CARAS in after.text, "Cara's row is there to be shown (she is present)"
    assert_told_right(db, after)


def test_a_store_dropped_and_migrated_again_in_place_is_another_store(db: Engine) -> None:
    the_group(db)
    world = row(WORLD_ID, "world", "The Bund is lit until 11 pm.")
    write(db, row(ROW_ID, f"u:{DAN}", DANS), world)
    before = warrens_block()
    assert DANS in before.text
    url = db.url.render_as_string(hide_password=False)

    with db.begin() as c:  # the operator starts over: every table dropped, init-db again
        metadata.drop_all(c)
        c.exec_driver_sql("DROP TABLE alembic_version")
    store.init_db(url)
    the_group(db)
    write(db, row(ROW_ID, f"u:{CARA}", CARAS), world)  # the same counters as before

    reader.catch_up()
    assert not cache_loader.READ_CACHE.held(url), "the sweep let go of all it held of the old store"
    assert_told_right(db, warrens_block())


def test_a_store_file_replaced_at_the_same_path_is_read_from_the_new_file(
    db: Engine, tmp_path: Any
) -> None:
    if not store.is_sqlite(db):
        pytest.skip("a SQLite file")
    the_group(db)
    write(db, row(ROW_ID, f"u:{DAN}", DANS))
    assert DANS in warrens_block().text
    path = str(db.url.database)

    other = tmp_path / "new.db"  # a new store, made elsewhere, with the same counters
    new_url = f"sqlite:///{other}"
    store.init_db(new_url)
    moved = "Dan moved to Lisbon in November."
    the_group(store.engine(new_url))
    write(store.engine(new_url), row(ROW_ID, f"u:{DAN}", moved))
    store.engine(new_url).dispose()
    with sqlite3.connect(path) as raw:  # the old file's log emptied, as a copy-in would leave it
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.replace(other, path)

    after = warrens_block()
    assert moved in after.text and DANS not in after.text, "read from the file now at the path"
    assert_told_right(db, after)


def test_every_version_has_a_stamp_of_its_own_and_the_log_carries_it(db: Engine) -> None:
    the_group(db)
    stamps: list[int] = []
    for n in range(3):
        write(db, row(ROW_ID + n, f"u:{DAN}", f"{DANS} {n}"))
        with db.connect() as c:
            v = t.persona_memory_versions.c
            version, stamp = c.execute(select(v.version, v.stamp)).one()
            ch = t.persona_memory_changes.c
            logged = c.execute(select(ch.stamp).where(ch.version == version)).scalar_one()
        assert version == n + 1 and logged == stamp
        stamps.append(stamp)
    assert len(set(stamps)) == 3


def test_init_db_gives_every_store_an_id_of_its_own(db: Engine, tmp_path: Any) -> None:
    def store_id(eng: Engine) -> str:
        with eng.connect() as c:
            return str(c.execute(select(t.store_identity.c.store_id)).scalar_one())

    other = f"sqlite:///{tmp_path / 'other.db'}"
    store.init_db(other)
    store.init_db(other)  # twice: the same store
    assert store_id(db) != store_id(store.engine(other))
    assert len(store_id(db)) == 32


def test_a_warm_open_checks_the_store_in_its_one_statement(db: Engine) -> None:
    """Every open reads the store's id with the versions; a warm one whose winners' rows the
    cache keeps reads nothing else (counted by SQLite itself: the statement runs on the
    driver's connection, outside SQLAlchemy's events)."""
    if not store.is_sqlite(db):
        pytest.skip("SQLite's own trace")
    the_group(db)
    write(db, row(ROW_ID, f"u:{DAN}", DANS))
    warrens_block()  # the cache warm...
    warrens_block()  # ...and the winners' rows kept
    seen: list[str] = []

    def trace(statement: str) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append(statement)

    def traced(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.set_trace_callback(trace)

    event.listen(db, "connect", traced)
    db.dispose()  # every connection from now on is traced
    try:
        warrens_block()
    finally:
        event.remove(db, "connect", traced)
    assert len(seen) == 1, "the context: nothing more"
    assert "store_identity" in seen[0], "the store's id is read with the versions"


def test_a_store_file_replaced_by_an_older_copy_of_itself_never_shows_what_the_copy_lacks(
    db: Engine, tmp_path: Any
) -> None:
    """The same store (same id) restored from an older copy by `os.replace` under the running
    process, then one write: the row written after the copy was taken is gone from every
    open, warm or cold, and from the file itself. The replaced file's write-ahead log stays at
    the path (SQLite leaves a moved file's log where it was) and the process's pooled
    connections still hold the old file: a connection to the new one must not read that log
    as its own."""
    if not store.is_sqlite(db):
        pytest.skip("a SQLite file")
    path = str(db.url.database)
    the_group(db)
    write(db, row(ROW_ID, f"u:{DAN}", DANS), row(WORLD_ID, "world", "The Bund is lit until 11."))
    warrens_block()
    older = tmp_path / "older.db"
    with sqlite3.connect(path) as live, sqlite3.connect(older) as copy:
        live.backup(copy)  # a consistent copy, store id and all
    live.close()
    copy.close()
    gone = "Dan quit his job in secret."
    write(db, row(ROW_ID + 5, f"u:{DAN}", gone))
    assert gone in warrens_block().text, "the process holds the row the copy lacks"

    os.replace(older, path)
    later = "Dan ran the Shanghai marathon in 3:58."
    write(db, row(ROW_ID + 6, f"u:{DAN}", later))  # one write, through the running process

    warm = build_block("warren", {DAN, CARA}, "g", now=NOW, touch=False, proven_scope=False)
    assert gone not in warm.text, "a warm open shows what the restore removed"
    assert later in warm.text
    cache_loader.READ_CACHE.clear()
    assert warm.text == warrens_block().text, "a warm open is what a cold open shows"
    reader.close(timeout=30)
    store.dispose_all()
    with sqlite3.connect(path) as fresh:
        texts = {r[0] for r in fresh.execute("SELECT text FROM persona_memory")}
    fresh.close()
    assert gone not in texts and later in texts, "the file as a new process reads it"
