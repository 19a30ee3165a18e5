"""Rooms, their members and their transcript lines (`rooms`, `room_members`, `lines`).

The app writes these tables (the demo, tests and benchmarks play the app through
`add_room`, `join`, `say`); the worker and the reader only read them, except for the few
columns the worker owns (`archived`, `topic`, `topic_embedding`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select, update

from memory_worker.core import tables as t
from memory_worker.core.errors import UnknownRoom
from memory_worker.core.rows import Line, Room, human_id, human_ref, now_iso, stamp
from memory_worker.storage.prepared import PREPARED_IN_MAX, Prepared, in_parts

r = t.rooms.c
m = t.room_members.c
ln = t.lines.c


# --- the app's writes -----------------------------------------------------------------------


def add_room(
    conn: Connection,
    room_id: str,
    kind: str,
    members: list[str],
    *,
    incognito: bool = False,
    kit_mounted: bool = False,
    topic: str | None = None,
) -> str:
    """A room with its members: 'u:42' for humans, persona slugs for personas."""
    if kind not in ("private", "group"):
        raise ValueError(f"room kind must be 'private' or 'group', not {kind!r}")
    conn.execute(
        insert(t.rooms).values(
            id=room_id,
            kind=kind,
            incognito=int(incognito),
            kit_mounted=int(kit_mounted),
            topic=topic,
            created=now_iso(),
        )
    )
    for member in members:
        join(conn, room_id, member)
    return room_id


def join(conn: Connection, room_id: str, member: str) -> None:
    """A member joins: they witness the room's lines from now on, never those said before
    (`since_line`, docs/design.md §12)."""
    since = last_line_id(conn, room_id)
    conn.execute(insert(t.room_members).values(room_id=room_id, member=member, since_line=since))


def say(
    conn: Connection, room_id: str, speaker: str | int, text: str, *, at: str | None = None
) -> int:
    """Append a transcript line; an int speaker is a human id, 'dispatch:<source>' a line no
    human or persona said (the world's news). Returns the line id. `at` (the app's own time
    for the line) must be ISO 8601 with its offset (`rows.stamp`)."""
    who = human_ref(speaker) if isinstance(speaker, int) else speaker
    created = now_iso() if at is None else stamp(at)
    values = dict(room_id=room_id, speaker=who, text=text, created=created)
    return int(conn.execute(insert(t.lines).values(**values).returning(ln.id)).scalar_one())


def set_kit_mounted(conn: Connection, room_id: str, mounted: bool) -> None:
    conn.execute(update(t.rooms).where(r.id == room_id).values(kit_mounted=int(mounted)))


# --- the worker's columns -------------------------------------------------------------------


def set_archived(conn: Connection, room_id: str) -> None:
    conn.execute(update(t.rooms).where(r.id == room_id).values(archived=1))


def set_topic(conn: Connection, room_id: str, topic: str) -> None:
    conn.execute(update(t.rooms).where(r.id == room_id).values(topic=topic))


def topic(conn: Connection, room_id: str) -> str | None:
    found = conn.execute(select(r.topic).where(r.id == room_id)).scalar()
    return str(found) if found else None


def set_topic_embedding(conn: Connection, room_id: str, vector: bytes) -> None:
    conn.execute(update(t.rooms).where(r.id == room_id).values(topic_embedding=vector))


# --- reads ----------------------------------------------------------------------------------


def topics_after(conn: Connection, after_room_id: str, limit: int) -> list[tuple[str, str]]:
    """(id, topic) of up to `limit` rooms with a topic and an id above `after_room_id`, by id."""
    query = (
        select(r.id, r.topic)
        .where(r.topic.is_not(None), r.id > after_room_id)
        .order_by(r.id)
        .limit(limit)
    )
    return [(str(i), str(topic)) for i, topic in conn.execute(query)]


def require_room(conn: Connection, room_id: str) -> None:
    """Raise UnknownRoom unless the room exists."""
    if conn.execute(select(r.id).where(r.id == room_id)).first() is None:
        raise UnknownRoom(room_id)


def load_room(conn: Connection, room_id: str) -> Room:
    """The room as plain data; UnknownRoom if the store has never seen it."""
    found = conn.execute(
        select(
            r.id, r.kind, r.incognito, r.kit_mounted, r.archived, r.topic, r.topic_embedding
        ).where(r.id == room_id)
    ).first()
    if found is None:
        raise UnknownRoom(room_id)
    return Room(
        id=found.id,
        kind=found.kind,
        incognito=bool(found.incognito),
        kit_mounted=bool(found.kit_mounted),
        archived=bool(found.archived),
        topic=found.topic,
        topic_embedding=found.topic_embedding,
    )


def members(conn: Connection, room_id: str) -> tuple[list[str], list[int]]:
    """(persona slugs, human ids) of the room's members, each sorted."""
    found = conn.execute(select(m.member).where(m.room_id == room_id)).scalars()
    personas: list[str] = []
    humans: list[int] = []
    for member in found:
        uid = human_id(member)
        if uid is None:
            personas.append(member)
        else:
            humans.append(uid)
    return sorted(personas), sorted(humans)


LAST_LINE_ID = Prepared(lambda: select(func.max(ln.id)).where(ln.room_id == bindparam("room")))


def last_line_id(conn: Connection, room_id: str) -> int:
    """The newest line's id in the room (0: no lines yet). Each commit asks."""
    return int(LAST_LINE_ID.execute(conn, {"room": room_id}).scalar() or 0)


SPEAKERS = Prepared(
    lambda ids: select(ln.id, ln.speaker).where(ln.room_id == bindparam("room"), ln.id.in_(ids)),
    ids=0,  # line ids start at 1
)


def speakers(conn: Connection, room_id: str, ids: Iterable[int]) -> dict[int, str]:
    """line id → speaker, for these lines of the room (the evidence a commit checks)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    found: Any
    if len(wanted) <= PREPARED_IN_MAX:
        found = SPEAKERS.execute(conn, {"room": room_id}, ids=wanted).all()
    else:
        q = select(ln.id, ln.speaker).where(ln.room_id == room_id, ln.id.in_(wanted))
        found = conn.execute(q).all()
    return {int(i): str(who) for i, who in found}


LINE_SIZES = Prepared(
    lambda: (
        select(ln.id, ln.speaker, func.length(ln.text))
        .where(ln.room_id == bindparam("room"), ln.id > bindparam("after"))
        .order_by(ln.id)
        .limit(bindparam("limit"))
    )
)


def line_sizes(
    conn: Connection, room_id: str, after: int, limit: int
) -> list[tuple[int, str, int]]:
    """(id, speaker, characters of text) of up to `limit` lines after line `after`, oldest
    first: what a spell's window is cut from, without reading the texts."""
    found: Any = LINE_SIZES.execute(conn, {"room": room_id, "after": after, "limit": limit})
    return [(int(i), str(who), int(n or 0)) for i, who, n in found.all()]


LINES_BETWEEN = Prepared(
    lambda: (
        select(ln.id, ln.room_id, ln.speaker, ln.text, ln.created)
        .where(
            ln.room_id == bindparam("room"), ln.id > bindparam("after"), ln.id <= bindparam("last")
        )
        .order_by(ln.id)
    )
)


def lines_between(conn: Connection, room_id: str, after: int, last: int) -> list[Line]:
    """The room's lines with `after < id <= last`, oldest first (a spell's slice)."""
    found: Any = LINES_BETWEEN.execute(conn, {"room": room_id, "after": after, "last": last})
    return [Line(*row) for row in found.all()]


def lagging_rooms(
    conn: Connection, *, written_before: str | None = None, written_after: str | None = None
) -> list[str]:
    """Rooms (not incognito) where some persona member's cursor is behind the last line.

    With `written_before` only lines written before then count (a room that has waited long
    enough); with `written_after` only lines written since (the frequent sweep's cheap window,
    on `ix_lines_created`; the daily sweep looks at everything).
    """
    c = t.cursors.c
    last_q = select(ln.room_id, func.max(ln.id).label("last_id"))
    if written_before is not None:
        last_q = last_q.where(ln.created < written_before)
    if written_after is not None:
        last_q = last_q.where(ln.created >= written_after)
    last = last_q.group_by(ln.room_id).subquery()
    q = (
        select(m.room_id)
        .join(t.rooms, r.id == m.room_id)
        .join(last, last.c.room_id == m.room_id)
        .outerjoin(t.cursors, (c.room_id == m.room_id) & (c.persona == m.member))
        .where(
            r.incognito == 0,
            ~m.member.like("u:%"),
            func.coalesce(c.last_line_id, 0) < last.c.last_id,
        )
        .distinct()
        .order_by(m.room_id)
    )
    return list(conn.execute(q).scalars())


def lines_by_id(conn: Connection, ids: Iterable[int]) -> dict[int, Line]:
    """Transcript lines by id (a row's evidence)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    columns = (ln.id, ln.room_id, ln.speaker, ln.text, ln.created)
    return {
        row.id: Line(row.id, row.room_id, row.speaker, row.text, row.created)
        for part in in_parts(wanted)
        for row in conn.execute(select(*columns).where(ln.id.in_(part)))
    }


def joined(conn: Connection, room_id: str) -> dict[int, int]:
    """The room's human members → the room's last line id when each joined: the lines after
    it are the ones they witnessed (`provenance.witnesses`)."""
    q = select(m.member, m.since_line).where(m.room_id == room_id, m.member.like("u:%"))
    out: dict[int, int] = {}
    for member, since in conn.execute(q):
        uid = human_id(member)
        if uid is not None:
            out[uid] = int(since or 0)
    return out


def memberships(conn: Connection, user_id: int, room_ids: Iterable[int | str]) -> dict[str, int]:
    """Of these rooms, those the user is a member of → the room's last line id when they
    joined: which of a row's evidence lines they witnessed (the human's page)."""
    wanted = sorted({str(x) for x in room_ids})
    if not wanted:
        return {}
    q = select(m.room_id, m.since_line).where(m.member == human_ref(user_id), m.room_id.in_(wanted))
    return {str(room): int(since or 0) for room, since in conn.execute(q)}


def rooms_of(conn: Connection, member: str) -> list[Room]:
    """The rooms `member` ('u:42' or a persona slug) is in, newest first."""
    q = (
        select(r.id, r.kind, r.incognito, r.kit_mounted, r.archived)
        .join(t.room_members, m.room_id == r.id)
        .where(m.member == member)
        .order_by(r.created.desc(), r.id)
    )
    return [
        Room(row.id, row.kind, bool(row.incognito), bool(row.kit_mounted), bool(row.archived))
        for row in conn.execute(q)
    ]
