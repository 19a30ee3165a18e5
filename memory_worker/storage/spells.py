"""The worker's bookkeeping: spell outcomes (`spells`) and each persona's cursor (`cursors`).

`spells` is the commit's idempotency key — one row per (persona, room, last line) — and the
operator's view of what was skipped or parked. A cursor says which lines a persona has read in
a room; it only ever moves forward.

What every spell's commit runs here is `Prepared` (`memory_worker.storage.prepared`): compiled
once per process, so a spell pays for its parameters, not for building SQL. The cursor and the
outcome are each one upsert (ON CONFLICT, in each dialect's own insert construct), not a read
and then a write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from sqlalchemy import Connection, Insert, Table, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite

from memory_worker.core import tables as t
from memory_worker.core.rows import Spell
from memory_worker.storage.prepared import Prepared

s = t.spells.c
c = t.cursors.c

# sqlite.insert or postgresql.insert: both have ON CONFLICT, spelled alike.
InsertFor = Callable[[Table], sqlite.Insert | postgresql.Insert]


def _per_dialect(build: Callable[[InsertFor], Insert]) -> dict[str, Prepared]:
    """An upsert for each dialect the store runs on (their insert constructs differ)."""
    return {
        "sqlite": Prepared(lambda: build(sqlite.insert)),
        "postgresql": Prepared(lambda: build(postgresql.insert)),
    }


# --- cursors --------------------------------------------------------------------------------


CURSOR = Prepared(
    lambda: select(c.last_line_id).where(
        c.persona == bindparam("persona"), c.room_id == bindparam("room_id")
    )
)


def cursor(conn: Connection, persona: str, room_id: str) -> int:
    """The last line id this persona has read in this room (0: none yet)."""
    found = CURSOR.execute(conn, {"persona": persona, "room_id": room_id}).scalar()
    return int(found or 0)


def _advance_statement(insert_for: InsertFor) -> Insert:
    new = insert_for(t.cursors).values(
        persona=bindparam("persona"),
        room_id=bindparam("room_id"),
        last_line_id=bindparam("last_line_id"),
        updated=bindparam("updated"),
    )
    moved = new.excluded
    return new.on_conflict_do_update(
        index_elements=[c.persona, c.room_id],
        set_={"last_line_id": moved.last_line_id, "updated": moved.updated},
        where=c.last_line_id < moved.last_line_id,
    )


ADVANCE_CURSOR = _per_dialect(_advance_statement)


def advance_cursor(
    conn: Connection, persona: str, room_id: str, last_line_id: int, now: str
) -> None:
    """cursor = max(cursor, last line): an older spell finishing late never moves it back
    (the upsert's WHERE: a cursor at or past `last_line_id` keeps its line and its stamp)."""
    ADVANCE_CURSOR[conn.dialect.name].execute(
        conn,
        {"persona": persona, "room_id": room_id, "last_line_id": last_line_id, "updated": now},
    )


# --- outcomes -------------------------------------------------------------------------------


OUTCOME = Prepared(
    lambda: select(s.status, s.row_ids).where(
        s.persona == bindparam("persona"),
        s.room_id == bindparam("room_id"),
        s.last_line_id == bindparam("last_line_id"),
    )
)


def outcome(conn: Connection, spell: Spell) -> tuple[str, list[int]] | None:
    """(status, row ids) recorded for this spell's key, or None."""
    got: Any = OUTCOME.execute(conn, _key(spell)).first()
    if got is None:
        return None
    return str(got[0]), [int(i) for i in json.loads(got[1])]


def _key(spell: Spell) -> dict[str, Any]:
    return {"persona": spell.persona, "room_id": spell.room_id, "last_line_id": spell.last_line_id}


KEY = ("persona", "room_id", "last_line_id")
OUTCOME_COLUMNS = ("status", "reason", "row_ids", "tokens_in", "tokens_out", "dropped", "created")


def _record_statement(insert_for: InsertFor) -> Insert:
    new = insert_for(t.spells).values({k: bindparam(k) for k in (*KEY, *OUTCOME_COLUMNS)})
    return new.on_conflict_do_update(
        index_elements=[s[k] for k in KEY],
        set_={k: new.excluded[k] for k in OUTCOME_COLUMNS},
    )


RECORD = _per_dialect(_record_statement)


def record(
    conn: Connection, spell: Spell, status: str, reason: str | None, row_ids: list[int], now: str
) -> None:
    """Write (or overwrite) the spell's outcome under its key, with its token counts."""
    RECORD[conn.dialect.name].execute(
        conn,
        {
            **_key(spell),
            "status": status,
            "reason": reason,
            "row_ids": json.dumps(row_ids),
            "tokens_in": spell.tokens_in,
            "tokens_out": spell.tokens_out,
            "dropped": json.dumps(spell.dropped, sort_keys=True),
            "created": now,
        },
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


RESOLVE_PARKED = Prepared(  # a column's name is the SET clause's own bind name: k_* here
    lambda: (
        update(t.spells)
        .where(
            s.persona == bindparam("k_persona"),
            s.room_id == bindparam("k_room_id"),
            s.status == "parked",
            s.last_line_id <= bindparam("k_through"),
        )
        .values(status="resolved", reason=bindparam("k_reason"))
    )
)


def resolve_parked(conn: Connection, persona: str, room_id: str, through_line_id: int) -> int:
    """Parked spells whose lines a committed spell now covers no longer need an operator:
    marked 'resolved'. Returns how many."""
    res = RESOLVE_PARKED.execute(
        conn,
        {
            "k_persona": persona,
            "k_room_id": room_id,
            "k_through": through_line_id,
            "k_reason": f"covered by a later spell (through {through_line_id})",
        },
    )
    return int(res.rowcount or 0)
