"""The app's side of the contract: writes to its tables the way the chat app would (users,
personas, rooms, lines), and the reads of them that the worker and the reader share.

The app is not in this repo; the demo, the tests, the exams and the benchmarks play it
through these functions, so they all write the contract in `schema/` the same way.
"""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from memory_worker import tables as t
from memory_worker.rows import Room, human_id, human_ref, now_iso


class UnknownRoom(LookupError):
    """The app named a room the store has never seen."""

    def __init__(self, room_id: str):
        super().__init__(f"unknown room {room_id!r}: no such row in `rooms`")
        self.room_id = room_id


def add_user(conn: Connection, user_id: int, name: str, *, memory_on: bool = True) -> int:
    conn.execute(insert(t.users).values(id=user_id, name=name, memory_on=int(memory_on)))
    return user_id


def add_persona(conn: Connection, slug: str, name: str) -> str:
    conn.execute(insert(t.personas).values(slug=slug, name=name))
    return slug


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
    for m in members:
        join(conn, room_id, m)
    return room_id


def join(conn: Connection, room_id: str, member: str) -> None:
    conn.execute(insert(t.room_members).values(room_id=room_id, member=member))


def leave(conn: Connection, room_id: str, member: str) -> None:
    conn.execute(
        t.room_members.delete().where(
            t.room_members.c.room_id == room_id, t.room_members.c.member == member
        )
    )


def say(
    conn: Connection, room_id: str, speaker: str | int, text: str, *, at: str | None = None
) -> int:
    """Append a transcript line; an int speaker is a human id. Returns the line id."""
    who = human_ref(speaker) if isinstance(speaker, int) else speaker
    res = conn.execute(
        insert(t.lines).values(room_id=room_id, speaker=who, text=text, created=at or now_iso())
    )
    return int(res.inserted_primary_key[0])


def set_kit_mounted(conn: Connection, room_id: str, mounted: bool) -> None:
    conn.execute(update(t.rooms).where(t.rooms.c.id == room_id).values(kit_mounted=int(mounted)))


def require_room(conn: Connection, room_id: str) -> None:
    """Raise UnknownRoom unless the room exists."""
    if conn.execute(select(t.rooms.c.id).where(t.rooms.c.id == room_id)).first() is None:
        raise UnknownRoom(room_id)


def load_room(conn: Connection, room_id: str) -> Room:
    """The room as plain data; UnknownRoom if the store has never seen it."""
    r = t.rooms.c
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
    found = conn.execute(
        select(t.room_members.c.member).where(t.room_members.c.room_id == room_id)
    ).scalars()
    personas, humans = [], []
    for m in found:
        uid = human_id(m)
        if uid is None:
            personas.append(m)
        else:
            humans.append(uid)
    return sorted(personas), sorted(humans)


def persona_names(conn: Connection, slugs: list[str]) -> dict[str, str]:
    """Display names by slug; a persona the app never named is shown by its slug."""
    p = t.personas.c
    found = dict(conn.execute(select(p.slug, p.name).where(p.slug.in_(slugs))).all())
    return {s: found.get(s) or s for s in slugs}
