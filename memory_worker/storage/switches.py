"""The history of the switches a line is judged by (`switch_log`, kept by the store's triggers).

The reads only: the triggers of migration 0017 write every change of `users.memory_on`,
`persona_memory_mute` and `rooms.kit_mounted`, whoever makes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, and_, or_, select

from memory_worker.core import tables as t
from memory_worker.core.labels import Flip

s = t.switch_log.c


@dataclass(frozen=True)
class Flips:
    """The changes that concern one persona's spells in one room, in the order they happened."""

    memory_on: dict[int, list[Flip]] = field(default_factory=dict)
    muted: dict[int, list[Flip]] = field(default_factory=dict)
    kit: list[Flip] = field(default_factory=list)


def flips(
    conn: Connection, persona: str, room_id: str, humans: Sequence[int], after_line: int
) -> Flips:
    """The flips of these humans' account switch and mute of `persona`, and of the room's kit,
    that took effect after line `after_line` (those before it are in the first one's `was`)."""
    ids = sorted(set(humans))
    which = [and_(s.switch == "kit", s.room_id == room_id)]
    if ids:
        which.append(and_(s.switch == "memory_on", s.user_id.in_(ids)))
        which.append(and_(s.switch == "mute", s.persona == persona, s.user_id.in_(ids)))
    query = (
        select(s.switch, s.user_id, s.was, s.now, s.after_line)
        .where(or_(*which), s.after_line >= after_line)
        .order_by(s.id)
    )
    out = Flips()
    for switch, user_id, was, now, after in conn.execute(query):
        flip = Flip(int(after), bool(was), bool(now))
        if switch == "kit":
            out.kit.append(flip)
        elif switch == "memory_on":
            out.memory_on.setdefault(int(user_id), []).append(flip)
        else:
            out.muted.setdefault(int(user_id), []).append(flip)
    return out
