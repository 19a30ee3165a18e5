"""The page's counts and meter (`memories.page_counts`) are counters the store's triggers keep
(schema/versions/0019): after every kind of write — a commit's inserts and closes, a world
row's audience, a delete, an undo, "clear all", "forget me" — they equal a real COUNT of the
rows about each human. And "clear all" clears more rows than a statement may bind."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import pytest
from sqlalchemy import Connection, Engine, event, func, insert, select, text, update

from memory_worker import controls
from memory_worker.core import tables as t
from memory_worker.core.rows import Candidate
from memory_worker.storage import memories, notices, store
from tests import scenes
from tests.scenes import CARA, DAN, NOLAN_H

pytestmark = pytest.mark.store

HUMANS = (DAN, CARA, NOLAN_H)
NOW = "2026-12-06T10:00:00+00:00"


def real_counts(conn: Connection, user_id: int) -> dict[str, tuple[int, int, int]]:
    """What the page counted before the counters: every row about the user, read."""
    pm = t.persona_memory.c
    is_open = pm.valid_to.is_(None)
    found = conn.execute(
        select(
            pm.persona,
            func.count().filter(is_open),
            func.count().filter(pm.valid_to.is_not(None)),
            func.coalesce(func.sum(func.length(pm.text)).filter(is_open), 0),
        )
        .where(memories.about_user(user_id))
        .group_by(pm.persona)
    )
    return {str(p): (int(o), int(c), int(m)) for p, o, c, m in found}


def assert_counted(db: Engine) -> None:
    with db.connect() as conn:
        for user_id in HUMANS:
            assert memories.page_counts(conn, user_id) == real_counts(conn, user_id), user_id


def write(
    db: Engine,
    subject: str,
    words: str,
    *,
    persona: str = "warren",
    counterpart: str | None = None,
    audience: list[int] | None = None,
) -> int:
    """A row as the commit writes it (a world row with its audience), and a toast for it."""
    with db.begin() as conn:
        row_id = memories.insert_row(
            conn,
            persona=persona,
            room_id="dm-dan",
            witnessed=[DAN],
            candidate=Candidate(subject, "fact", words, 5, (1,), counterpart=counterpart),
            embedding=None,
            now=NOW,
            private_to=audience,
        )
        if audience:
            memories.set_audience(conn, row_id, audience)
    return row_id


@pytest.fixture
def stored(db: Engine) -> dict[str, int]:
    """Rows of every way a row concerns someone, for two personas and three humans."""
    scenes.people(db)
    ids = {
        "dan": write(db, f"u:{DAN}", "u:42 owns a flat in Xuhui."),
        "dan nolan": write(db, f"u:{DAN}", "u:42 plays go.", persona="nolan"),
        "cara": write(db, f"u:{CARA}", "u:17 swims at dawn."),
        "promise": write(db, "self", "Warren promised u:42 the list.", counterpart=f"u:{DAN}"),
        "world": write(db, "world", "The Majestic shows The Odyssey.", audience=[DAN, CARA]),
        "world dan": write(db, "world", "The bridge is shut.", audience=[DAN]),
        "public": write(db, "world", "It rained all week."),
        "self": write(db, "self", "Warren likes tea."),
    }
    return ids


def test_the_counters_equal_a_real_count_after_inserts_of_every_kind(
    stored: dict[str, int], db: Engine
) -> None:
    with db.connect() as conn:
        counted = memories.page_counts(conn, DAN)
    assert counted == {"warren": (4, 0, 106), "nolan": (1, 0, 14)}
    assert_counted(db)


def test_the_counters_follow_a_close_a_reopen_and_an_edit(
    stored: dict[str, int], db: Engine
) -> None:
    newer = write(db, f"u:{DAN}", "u:42 sold the flat in Xuhui.")
    with db.begin() as conn:
        memories.close(conn, stored["dan"], NOW[:10], newer)
        memories.close(conn, stored["world"], NOW[:10], None)
    assert_counted(db)
    with db.begin() as conn:
        memories.reopen(conn, [stored["dan"]])
        conn.execute(
            t.persona_memory.update()
            .where(t.persona_memory.c.id == stored["promise"])
            .values(text="Warren promised u:42 two lists.", persona="nolan")
        )
    assert_counted(db)


def test_the_counters_follow_a_world_row_s_audience_as_it_changes(
    stored: dict[str, int], db: Engine
) -> None:
    with db.begin() as conn:
        memories.set_audience(conn, stored["world"], [CARA, NOLAN_H], was=[DAN, CARA])
    assert_counted(db)


@pytest.mark.parametrize(
    "act",
    [
        pytest.param(lambda ids: controls.delete_row(DAN, ids["dan"]), id="delete"),
        pytest.param(lambda ids: controls.delete_row(DAN, ids["world"]), id="leave a world row"),
        pytest.param(lambda ids: controls.clear_all(DAN), id="clear all"),
        pytest.param(lambda ids: controls.clear_all(DAN, persona="nolan"), id="clear a persona"),
        pytest.param(lambda ids: controls.clear_all(CARA), id="clear all of a shared row"),
        pytest.param(lambda ids: controls.mute(DAN, "warren"), id="forget me"),
    ],
)
def test_the_counters_equal_a_real_count_after_each_of_the_human_s_controls(
    stored: dict[str, int], db: Engine, act: Callable[[dict[str, int]], object]
) -> None:
    act(stored)
    assert_counted(db)


def test_the_counters_equal_a_real_count_after_an_undo_reopens_what_an_update_closed(
    stored: dict[str, int], db: Engine
) -> None:
    newer = write(db, f"u:{DAN}", "u:42 sold the flat in Xuhui.")
    world = write(db, "world", "The bridge opened.", audience=[DAN, CARA])
    with db.begin() as conn:
        memories.close(conn, stored["dan"], NOW[:10], newer)
        notice = notices.post(
            conn,
            user_id=DAN,
            persona="warren",
            room_id="dm-dan",
            spell_key="warren/dm-dan/1",
            text="Warren noted: … · undo",
            row_ids=[newer, world],
            now=NOW,
        )
    assert notice is not None
    assert_counted(db)
    assert controls.undo_notice(DAN, notice) == 2
    assert_counted(db)


def test_a_world_row_deleted_whole_leaves_every_human_of_its_audience_s_count(
    stored: dict[str, int], db: Engine
) -> None:
    """Its audience's rows go by ON DELETE CASCADE, after the row: the row's own trigger
    counts them out first."""
    with db.begin() as conn:
        memories.delete_rows(conn, [stored["world"], stored["world dan"]])
    assert_counted(db)


def test_recount_writes_what_the_triggers_keep(stored: dict[str, int], db: Engine) -> None:
    with db.begin() as conn:
        conn.execute(t.persona_memory_counts.delete())
        memories.recount(conn)
    assert_counted(db)


def test_the_migration_counts_the_rows_stored_before_it(stored: dict[str, int], db: Engine) -> None:
    """A store upgraded to 0019 with rows in it: its counters start at what those rows count."""
    from alembic import command

    cfg = store.alembic_config(str(db.url))
    with db.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0018")
    with db.begin() as conn:
        scenes.row_as_stored_before(conn, f"u:{DAN}", "u:42 was written with no counter.")
    with db.begin() as conn:
        # A close as 0018 wrote it (`memories.close` also stamps `toggled`, 0023).
        pm = t.persona_memory.c
        conn.execute(
            update(t.persona_memory).where(pm.id == stored["cara"]).values(valid_to=NOW[:10])
        )
        memories.set_audience(conn, stored["world dan"], [DAN, NOLAN_H], was=[DAN])
    store.init_db(str(db.url))
    assert_counted(db)


SQLITE_MAX_VARIABLES = 32_766  # a stock SQLite's bound parameters a statement (Debian's: 250k)
CLEARED = 40_000


def _stock_limit(dbapi: sqlite3.Connection, _: object) -> None:
    dbapi.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, SQLITE_MAX_VARIABLES)


@pytest.mark.slow  # 40,000 rows written and cleared: seconds
def test_clear_all_clears_more_rows_than_one_statement_may_bind(db: Engine) -> None:
    """Clear all deleted by one list of every id: past the limit the statement failed and
    nothing was cleared. On SQLite only: PostgreSQL's limit (65,535) needs 66k rows, whose
    per-row triggers took over five minutes to load on the shared host."""
    if db.dialect.name != "sqlite":
        pytest.skip("SQLite's limit; PostgreSQL's needs minutes of per-row triggers")
    db.dispose()  # every connection from here on has a stock SQLite's limit
    event.listen(db, "connect", _stock_limit)
    scenes.people(db)
    row = {
        "persona": "warren",
        "subject": f"u:{DAN}",
        "witnessed": json.dumps([DAN]),
        "room_id": "dm-dan",
        "kind": "fact",
        "importance": 5,
        "evidence": "[]",
        "created": NOW,
    }
    with db.begin() as conn:
        conn.execute(
            insert(t.persona_memory),
            [
                row | {"text": f"u:42 said {i}", "valid_to": NOW if i % 5 else None}
                for i in range(CLEARED)
            ],
        )
    assert controls.clear_all(DAN) == CLEARED
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM persona_memory")).scalar_one() == 0
    assert_counted(db)
