"""Lines' stamps (`line_stamps`) and the reach of a persona's echo (`echo_reach`).

The reads only, and the one setting the store's trigger reads: the trigger of migration 0021
stamps every line in the transaction that stores it, whoever stores it — `app_side.say` or the
app's own SQL (docs/design.md §12).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from memory_worker.core import tables as t
from memory_worker.core.labels import Stamp
from memory_worker.storage.prepared import Prepared

s = t.line_stamps.c

BETWEEN = Prepared(
    lambda: select(s.line_id, s.readable, s.heard, s.label).where(
        s.persona == bindparam("persona"),
        s.room_id == bindparam("room"),
        s.line_id > bindparam("after"),
        s.line_id <= bindparam("last"),
    )
)


def between(
    conn: Connection, persona: str, room_id: str, after: int, last: int
) -> dict[int, Stamp]:
    """line id → the persona's stamp, for the room's lines with `after < id <= last` (a line
    missing was said before the persona joined: it has none)."""
    params = {"persona": persona, "room": room_id, "after": after, "last": last}
    found: Any = BETWEEN.execute(conn, params).all()
    return {int(i): Stamp.parse(r, heard, label) for i, r, heard, label in found}


def set_echo_reach(conn: Connection, lines: int) -> None:
    """How many previous lines of its room a persona's line is stamped with from now on."""
    conn.execute(update(t.echo_reach).where(t.echo_reach.c.id == 1).values(lines=lines))
