"""Notices (`notices`): the toast a human gets for a spell, and its undo (docs/design.md §5).

Written with the rows (an outbox), keyed by (spell, user) so a second run posts nothing.
What every spell runs here is `Prepared` (`memory_worker.storage.prepared`): compiled once
per process, run as the driver's SQL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, insert, select, update

from memory_worker.core import tables as t
from memory_worker.storage.prepared import PREPARED_IN_MAX, Prepared

n = t.notices.c
TOAST_KIND = "memory_toast"


@dataclass(frozen=True)
class Notice:
    id: int
    user_id: int
    persona: str
    room_id: str
    text: str
    row_ids: list[int]
    spell_key: str
    undone: bool
    created: str


POSTED = Prepared(
    lambda: select(n.id).where(
        n.spell_key == bindparam("spell_key"), n.user_id == bindparam("user_id")
    )
)
POSTED_COLUMNS = ("user_id", "persona", "room_id", "text", "row_ids", "spell_key", "created")
POST = Prepared(
    lambda: (
        insert(t.notices)
        .values({k: bindparam(k) for k in POSTED_COLUMNS} | {"kind": TOAST_KIND})
        .returning(n.id)
    )
)


def post(
    conn: Connection,
    *,
    user_id: int,
    persona: str,
    room_id: str,
    spell_key: str,
    text: str,
    row_ids: list[int],
    now: str,
) -> int | None:
    """Insert the toast unless this spell already posted one to this user: its id, else None.

    A look first, not ON CONFLICT DO NOTHING: on PostgreSQL that would spend an identity value
    on every second run, leaving gaps in the notice ids."""
    if POSTED.execute(conn, {"spell_key": spell_key, "user_id": user_id}).first():
        return None
    new = POST.execute(
        conn,
        {
            "user_id": user_id,
            "persona": persona,
            "room_id": room_id,
            "text": text,
            "row_ids": json.dumps(row_ids),
            "spell_key": spell_key,
            "created": now,
        },
    )
    return int(new.scalar_one())


def _notice(row: Row[Any]) -> Notice:
    m = row._mapping
    return Notice(
        id=int(m["id"]),
        user_id=int(m["user_id"]),
        persona=m["persona"],
        room_id=m["room_id"],
        text=m["text"],
        row_ids=[int(i) for i in json.loads(m["row_ids"] or "[]")],
        spell_key=m["spell_key"],
        undone=bool(m["undone"]),
        created=m["created"],
    )


def get(conn: Connection, notice_id: int) -> Notice | None:
    found = conn.execute(select(t.notices).where(n.id == notice_id)).first()
    return _notice(found) if found is not None else None


def all_notices(conn: Connection) -> list[Notice]:
    """Every notice, oldest first (the demo, tests)."""
    return [_notice(r) for r in conn.execute(select(t.notices).order_by(n.id))]


def mark_undone(conn: Connection, notice_id: int) -> None:
    conn.execute(update(t.notices).where(n.id == notice_id).values(undone=1))


def of_user(conn: Connection, user_id: int, after_id: int = 0, limit: int = 20) -> list[Notice]:
    """The user's newest notices (only those after `after_id`), newest first: the rail."""
    q = (
        select(t.notices)
        .where(n.user_id == user_id, n.id > after_id)
        .order_by(n.id.desc())
        .limit(limit)
    )
    return [_notice(r) for r in conn.execute(q)]


def of_user_before(
    conn: Connection, user_id: int, before_id: int | None, limit: int
) -> list[Notice]:
    """The user's notices below `before_id` (None: from the newest), newest first: an export
    reads every one of them a step at a time."""
    where = n.user_id == user_id
    if before_id is not None:
        where = and_(where, n.id < before_id)
    return [
        _notice(r)
        for r in conn.execute(select(t.notices).where(where).order_by(n.id.desc()).limit(limit))
    ]


def of_place(conn: Connection, persona: str, room_id: str) -> list[Notice]:
    """The notices one persona posted for spells in one room (a deleted row's toasts)."""
    q = select(t.notices).where(n.persona == persona, n.room_id == room_id).order_by(n.id)
    return [_notice(r) for r in conn.execute(q)]


def reword(conn: Connection, notice_id: int, text: str, row_ids: list[int]) -> None:
    """A toast after some of its rows were deleted: new wording, only the rows still there."""
    values = dict(text=text, row_ids=json.dumps(row_ids))
    conn.execute(update(t.notices).where(n.id == notice_id).values(**values))


def add_row(conn: Connection, row_id: int, also: int) -> None:
    """The toasts that list row `row_id` list row `also` too: the same sentence, stored again
    for more people (the commit's exactly-once across audiences), so undoing the toast reaches
    both copies."""
    like = conn.execute(select(n.id, n.row_ids).where(n.row_ids.like(f"%{int(row_id)}%")))
    for notice_id, ids in like.all():
        listed = [int(i) for i in json.loads(ids or "[]")]
        if row_id in listed and also not in listed:
            values = dict(row_ids=json.dumps([*listed, also]))
            conn.execute(update(t.notices).where(n.id == notice_id).values(**values))


# --- the outbox -------------------------------------------------------------------------------


UNDELIVERED = Prepared(
    lambda: (
        select(t.notices)
        .where(n.spell_key == bindparam("spell_key"), n.delivered == 0)
        .order_by(n.id)
    )
)


def undelivered(conn: Connection, spell_key: str) -> list[Notice]:
    """The spell's notices not yet handed to the app's channel, oldest first."""
    return [_notice(r) for r in UNDELIVERED.execute(conn, {"spell_key": spell_key}).all()]


# No ORDER BY in SQL: ordered by id, SQLite scans the whole table in rowid order instead of
# the partial index of undelivered notices (1.4 ms a call at 20k notices against 0.01 ms).
UNDELIVERED_AT = Prepared(
    lambda: select(t.notices).where(
        n.delivered == 0, n.persona == bindparam("persona"), n.room_id == bindparam("room_id")
    )
)


def undelivered_at(conn: Connection, persona: str, room_id: str) -> list[Notice]:
    """Every notice a persona posted in a room and nobody handed to the app's channel yet,
    oldest first: a commit delivers its own toasts and any an earlier spell of the room left
    (its worker or broker died between its commit and its delivery). Reads the partial index
    of undelivered notices (few: each is delivered within seconds)."""
    params = {"persona": persona, "room_id": room_id}
    found = [_notice(r) for r in UNDELIVERED_AT.execute(conn, params).all()]
    return sorted(found, key=lambda notice: notice.id)


MARK_DELIVERED = Prepared(
    lambda ids: update(t.notices).where(n.id.in_(ids)).values(delivered=1),
    ids=-1,  # ids start at 1
)


def mark_delivered(conn: Connection, notice_ids: list[int]) -> None:
    for start in range(0, len(notice_ids), PREPARED_IN_MAX):
        MARK_DELIVERED.execute(conn, {}, ids=notice_ids[start : start + PREPARED_IN_MAX])


def waiting_spells(conn: Connection, written_before: str) -> list[str]:
    """Spell keys with a notice written before `written_before` and still undelivered (the
    sweep: a commit that died, or lost its broker, between its commit and its delivery).
    Reads the partial index only."""
    # DISTINCT and ORDER BY here, not in SQL: with them SQLite walks the (spell, user)
    # index over every notice ever posted (12 ms at 20k notices) instead of the partial one.
    q = select(n.spell_key).where(n.delivered == 0, n.created < written_before)
    return sorted(set(conn.execute(q).scalars()))
