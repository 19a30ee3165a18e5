"""The worker's bookkeeping: spell outcomes (`spells`) and each persona's cursor (`cursors`).

`spells` is the commit's idempotency key — one row per (persona, room, last line) — and the
operator's view of what was skipped or parked. A cursor says which lines a persona has read in
a room; it only ever moves forward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from sqlalchemy import Connection, insert, select, update

from memory_worker import tables as t
from memory_worker.rows import Spell

s = t.spells.c
c = t.cursors.c


# --- cursors --------------------------------------------------------------------------------


def cursor(conn: Connection, persona: str, room_id: str) -> int:
    """The last line id this persona has read in this room (0: none yet)."""
    found = conn.execute(
        select(c.last_line_id).where(c.persona == persona, c.room_id == room_id)
    ).scalar()
    return int(found or 0)


def advance_cursor(
    conn: Connection, persona: str, room_id: str, last_line_id: int, now: str
) -> None:
    """cursor = max(cursor, last line): an older spell finishing late never moves it back."""
    where = (c.persona == persona, c.room_id == room_id)
    current = conn.execute(select(c.last_line_id).where(*where)).scalar()
    if current is None:
        conn.execute(
            insert(t.cursors).values(
                persona=persona, room_id=room_id, last_line_id=last_line_id, updated=now
            )
        )
    elif current < last_line_id:
        conn.execute(update(t.cursors).where(*where).values(last_line_id=last_line_id, updated=now))


# --- outcomes -------------------------------------------------------------------------------


def outcome(conn: Connection, spell: Spell) -> tuple[str, list[int]] | None:
    """(status, row ids) recorded for this spell's key, or None."""
    got = conn.execute(
        select(s.status, s.row_ids).where(
            s.persona == spell.persona,
            s.room_id == spell.room_id,
            s.last_line_id == spell.last_line_id,
        )
    ).first()
    if got is None:
        return None
    return str(got.status), [int(i) for i in json.loads(got.row_ids)]


def record(
    conn: Connection, spell: Spell, status: str, reason: str | None, row_ids: list[int], now: str
) -> None:
    """Write (or overwrite) the spell's outcome under its key, with its token counts."""
    key = (
        s.persona == spell.persona,
        s.room_id == spell.room_id,
        s.last_line_id == spell.last_line_id,
    )
    values: dict[str, Any] = dict(
        status=status,
        reason=reason,
        row_ids=json.dumps(row_ids),
        tokens_in=spell.tokens_in,
        tokens_out=spell.tokens_out,
        dropped=json.dumps(spell.dropped, sort_keys=True),
        created=now,
    )
    if conn.execute(update(t.spells).where(*key).values(**values)).rowcount == 0:
        conn.execute(
            insert(t.spells).values(
                persona=spell.persona,
                room_id=spell.room_id,
                last_line_id=spell.last_line_id,
                **values,
            )
        )


def latest(conn: Connection, persona: str, room_id: str | None = None) -> Mapping[str, Any] | None:
    """The persona's newest outcome (in `room_id` when given), as a mapping of its columns."""
    q = select(t.spells).where(s.persona == persona)
    if room_id is not None:
        q = q.where(s.room_id == room_id)
    found = conn.execute(q.order_by(s.last_line_id.desc())).mappings().first()
    return dict(found) if found is not None else None


class ParkedSpell(NamedTuple):
    persona: str
    room_id: str
    last_line_id: int
    reason: str | None
    created: str


def parked(conn: Connection) -> list[ParkedSpell]:
    """Every parked spell, oldest first (what an operator retries or reads)."""
    query = (
        select(s.persona, s.room_id, s.last_line_id, s.reason, s.created)
        .where(s.status == "parked")
        .order_by(s.created)
    )
    return [ParkedSpell(*row) for row in conn.execute(query)]


def resolve_parked(conn: Connection, persona: str, room_id: str, through_line_id: int) -> int:
    """Parked spells whose lines a committed spell now covers no longer need an operator:
    marked 'resolved'. Returns how many."""
    res = conn.execute(
        update(t.spells)
        .where(
            s.persona == persona,
            s.room_id == room_id,
            s.status == "parked",
            s.last_line_id <= through_line_id,
        )
        .values(status="resolved", reason=f"covered by a later spell (through {through_line_id})")
    )
    return int(res.rowcount or 0)
