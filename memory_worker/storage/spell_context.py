"""What a spell's steps read about its room, in one statement.

Beginning a spell and extracting from it each need the room (its switches), its members, the
humans' names and account switches, who muted this persona, the persona's name and its
cursor: six small reads that cost more in round trips and statement building than in
SQLite's own work (measured). `spell_context` folds them into one UNION ALL, compiled once per
process (`memory_worker.storage.prepared`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    CompoundSelect,
    Connection,
    Text,
    bindparam,
    cast,
    select,
    union_all,
)

from memory_worker.core import tables as t
from memory_worker.core.rows import Room
from memory_worker.storage.prepared import Prepared, tagged
from memory_worker.storage.read_path import room_branches, room_or_member


@dataclass(frozen=True)
class SpellContext:
    """The room as a spell sees it now."""

    room: Room
    personas: list[str]  # the room's persona members, sorted
    humans: list[int]  # the room's human members, sorted
    names: dict[int, str]  # display names of the humans asked for (those the store knows)
    memory_on: dict[int, bool]  # the account switch of the same
    muted: frozenset[int]  # of the same, those who told this persona to forget them
    persona_name: str  # the persona's display name (its slug if the app never named it)
    cursor: int  # the last line this persona has read in the room (0: none yet)

    def eligible(self, humans: Sequence[int]) -> list[int]:
        """Of these humans, those the persona may write about: memory on, this persona not
        muted (docs/design.md §5), sorted."""
        return sorted(h for h in humans if self.memory_on.get(h, False) and h not in self.muted)


def _statement(humans: list[BindParameter[Any]]) -> CompoundSelect[Any]:
    u, c = t.users.c, t.cursors.c
    mute, p = t.persona_memory_mute.c, t.personas.c
    room: BindParameter[str] = bindparam("room")
    persona: BindParameter[str] = bindparam("persona")
    return union_all(
        *room_branches(room),
        select(*tagged("user", cast(u.id, Text), a=u.name, n1=u.memory_on)).where(u.id.in_(humans)),
        select(*tagged("mute", mute.persona, n1=mute.user_id)).where(
            mute.persona == persona, mute.user_id.in_(humans)
        ),
        select(*tagged("name", p.slug, a=p.name)).where(p.slug == persona),
        select(*tagged("cursor", c.persona, n1=c.last_line_id)).where(
            c.persona == persona, c.room_id == room
        ),
    )


SPELL_CONTEXT = Prepared(_statement, humans=-1)  # no user -1
ROOM = Prepared(lambda: union_all(*room_branches(bindparam("room"))))


@dataclass(frozen=True)
class RoomMembers:
    room: Room
    personas: list[str]  # sorted
    humans: list[int]  # sorted


def room_members(conn: Connection, room_id: str) -> RoomMembers | None:
    """The room and who is in it, or None for an unknown room: what a quiet room's fan-out
    needs to start each persona's spell, in one statement."""
    personas: list[str] = []
    humans: list[int] = []
    room: Room | None = None
    row: Any
    for row in ROOM.execute(conn, {"room": room_id}).all():
        room = room_or_member(row, personas, humans) or room
    return None if room is None else RoomMembers(room, sorted(personas), sorted(humans))


def spell_context(
    conn: Connection, persona: str, room_id: str, humans: Sequence[int] = ()
) -> SpellContext | None:
    """The room as `persona`'s spell sees it now, with the names and switches of `humans`
    (the caller names them: a member id comes from the app as text, and a spell's witnesses
    may have left since), or None for an unknown room."""
    found = SPELL_CONTEXT.execute(
        conn, {"room": room_id, "persona": persona}, humans=sorted(set(humans))
    ).all()
    room: Room | None = None
    personas: list[str] = []
    members: list[int] = []
    names: dict[int, str] = {}
    memory_on: dict[int, bool] = {}
    muted: set[int] = set()
    persona_name, cursor = persona, 0
    row: Any
    for row in found:
        tag, k, a, b, n1, n2, n3, _ = row
        if tag in ("room", "member"):
            room = room_or_member(row, personas, members) or room
        elif tag == "user":
            names[int(k)] = a
            memory_on[int(k)] = bool(n1)
        elif tag == "mute":
            muted.add(int(n1))
        elif tag == "name":
            persona_name = a or persona
        else:
            cursor = int(n1)
    if room is None:
        return None
    return SpellContext(
        room=room,
        personas=sorted(personas),
        humans=sorted(members),
        names=names,
        memory_on=memory_on,
        muted=frozenset(muted),
        persona_name=persona_name,
        cursor=cursor,
    )
