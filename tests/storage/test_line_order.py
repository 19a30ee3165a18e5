"""PostgreSQL: a line committed after a later line's spell is never skipped (docs/design.md §10.3).

Transaction A inserts a line and stays open; B inserts the next line and commits; a spell
reads the room. Without order, the spell sees B's line but not A's, its cursor passes both,
and A's line — committed a moment later — is never mined. Lines of a room take their ids
under a per-room lock (schema/versions/0005), so B waits for A and a spell that sees a line
sees every earlier one. SQLite serialises writers: nothing to test there.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, func, select

from memory_worker import app_side
from memory_worker.core import tables as t
from memory_worker.write import window
from tests.scenes import DAN, people

pytestmark = pytest.mark.store


def test_a_spell_never_passes_a_line_that_a_still_open_transaction_will_commit(
    db: Engine,
) -> None:
    if db.dialect.name != "postgresql":
        pytest.skip(
            "SQLite serialises writers; run with MW_TEST_DATABASE_URL=postgresql+psycopg://…"
        )
    people(db)
    with db.begin() as conn:
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        app_side.say(conn, "dm-dan", DAN, "First line.")

    a = db.connect()
    a_tx = a.begin()
    app_side.say(a, "dm-dan", DAN, "A: written, not yet committed.")
    b_done = threading.Event()

    def b() -> None:
        with db.begin() as conn:
            app_side.say(conn, "dm-dan", DAN, "B: written and committed.")
        b_done.set()

    writer = threading.Thread(target=b)
    writer.start()
    b_done.wait(1.0)  # without the lock B commits at once; with it, B waits for A
    with db.connect() as conn:  # a spell reading the room now
        spell = window.begin_spell(conn, "warren", "dm-dan")
        read = {ln.id for ln in window.slice_of(conn, spell)} if spell else set()
    a_tx.commit()
    a.close()
    writer.join(30)
    assert b_done.is_set()

    last = spell.last_line_id if spell else 0
    with db.connect() as conn:
        below = set(
            conn.execute(
                select(t.lines.c.id).where(t.lines.c.room_id == "dm-dan", t.lines.c.id <= last)
            ).scalars()
        )
        ids = list(conn.execute(select(t.lines.c.id).order_by(t.lines.c.id)).scalars())
        assert conn.execute(select(func.count()).select_from(t.lines)).scalar() == 3
    assert below == read, f"the spell read {sorted(read)} through {last}, lines are {ids}"
