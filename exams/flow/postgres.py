"""The flow exam on PostgreSQL: a database per world, and switches in concurrent transactions.

`--database-url postgresql+psycopg://…/<db>` names a server and a database the exam may use to
make others: a template migrated once by the project's own `init_db` (`<db>_t<hex>`), then one
database per world copied from it (`<db>_w<seed>_<hex>`), each dropped when its world ends.

`concurrent_switch` is the world event only PostgreSQL can play: the app changes a switch
(memory on, a mute, a kit mount) in a second connection's transaction that is still open while
the first stores lines and commits — the switch committing before the lines' commit or after.
A line is stamped by the switches committed when its own INSERT ran (READ COMMITTED: each
statement of the store's trigger sees what was committed as it began), so the exam's oracle
records a line with the world's switches as committed at that moment, and applies the switch
to the world only when it commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, make_url
from sqlalchemy import text as sql
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from exams.flow.world import PERSONAS, Room, World
from memory_worker import app_side
from memory_worker.storage import store, users

LOCK_WAIT = "30s"  # a line's transaction never waits on the switch's: if it did, it would hang


def is_postgres(url: str | None) -> bool:
    return bool(url) and str(url).startswith("postgresql")


@contextmanager
def _admin(url: str) -> Iterator[Connection]:
    """The server's maintenance database: a database is made and dropped from outside it."""
    eng = create_engine(_named(url, "postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with eng.connect() as conn:
            yield conn
    finally:
        eng.dispose()


def unreachable(url: str) -> str | None:
    """Why the server cannot make the exam's databases, in one line (None: it can)."""
    try:
        with _admin(url) as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as e:  # any driver error: said in one line, never a traceback
        return str(e).splitlines()[0]
    return None


def _named(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _base(url: str) -> str:
    return make_url(url).database or "mw_flow"


def migrated_template(url: str) -> str:
    """A database migrated by `init_db`, with no connection left open: worlds are copied
    from it. Dropped by `drop`."""
    name = f"{_base(url)}_t{uuid.uuid4().hex[:8]}"
    with _admin(url) as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    template = _named(url, name)
    store.init_db(template)
    store.engine(template).dispose()
    return template


@contextmanager
def fresh_database(template: str, tag: str) -> Iterator[str]:
    """A copy of the template database for one world; dropped at the end, whatever happened."""
    name = f"{_base(template)}_{tag}_{uuid.uuid4().hex[:6]}"
    with _admin(template) as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}" TEMPLATE "{_base(template)}"')
    url = _named(template, name)
    try:
        yield url
    finally:
        store.engine(url).dispose()
        drop(url)


def drop(url: str) -> None:
    with _admin(url) as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{_base(url)}" WITH (FORCE)')


def raw_memory_switch(conn: Connection, values: dict[str, object], how: str) -> None:
    """The app's own SQL for a memory switch on PostgreSQL (it has no INSERT OR REPLACE): an
    upsert, or a DELETE then an INSERT."""
    if how == "replace":
        conn.execute(
            sql(
                "INSERT INTO users (id, name, memory_on) VALUES (:u, :name, :on) "
                "ON CONFLICT (id) DO UPDATE SET memory_on = EXCLUDED.memory_on"
            ),
            values,
        )
        return
    conn.execute(sql("DELETE FROM users WHERE id = :u"), values)
    conn.execute(sql("INSERT INTO users (id, name, memory_on) VALUES (:u, :name, :on)"), values)


def pending_switch(world: World, conn: Connection, room: Room) -> Callable[[], None]:
    """Change one switch that matters to `room` in `conn` (not yet committed); what to apply
    to the world when it commits."""
    rng = world.rng
    roll = rng.random()
    if room.kind == "group" and roll < 0.25:
        mounted = not room.kit
        app_side.set_kit_mounted(conn, room.id, mounted)
        return lambda: setattr(room, "kit", mounted)
    h = world.humans[rng.choice(sorted(room.humans))]
    if roll < 0.6:
        on = not h.memory_on
        users.set_memory_on(conn, h.id, on)
        return lambda: setattr(h, "memory_on", on)
    persona = rng.choice(room.personas or list(PERSONAS))
    if persona in h.mutes:
        users.remove_mute(conn, h.id, persona)
        return lambda: h.mutes.discard(persona)
    users.add_mute(conn, h.id, persona)
    return lambda: h.mutes.add(persona)


def concurrent_switch(
    world: World, room: Room, say_lines: Callable[[World, Connection, Room], None]
) -> None:
    """A switch in an open transaction of a second connection while lines are inserted and
    committed in the first: the switch commits before the lines' commit (and, as often as
    not, more lines follow it in the same transaction) or after it."""
    rng = world.rng
    with store.engine().connect() as other:
        switching = other.begin()
        apply = pending_switch(world, other, room)
        committed = False
        with store.transaction() as conn:
            conn.execute(sql(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'"))
            say_lines(world, conn, room)  # the switch is not committed: its old state stamps
            if rng.random() < 0.5:
                switching.commit()
                apply()
                committed = True
                if rng.random() < 0.5:
                    say_lines(world, conn, room)  # committed now: its new state stamps
        if not committed:
            switching.commit()
            apply()
