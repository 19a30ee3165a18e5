"""Begin a spell: the lines since a persona's cursor, who is present, and the skip rules.

The skip rules are code, checked before any model call (DESIGN.md "The write path"): an
incognito room writes nothing; a room with a kit mounted (role-play) is skipped; humans with
`memory_on = 0` or who muted this persona are dropped from the present set the model sees.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, select

from memory_worker import tables as t
from memory_worker.app_side import load_room, members, persona_names
from memory_worker.rows import Line, Spell


def cursor(conn: Connection, persona: str, room_id: str) -> int:
    """The last line id this persona has read in this room (0: none yet)."""
    v = conn.execute(
        select(t.cursors.c.last_line_id).where(
            t.cursors.c.persona == persona, t.cursors.c.room_id == room_id
        )
    ).scalar()
    return int(v or 0)


def last_line_id(conn: Connection, room_id: str) -> int:
    q = select(func.max(t.lines.c.id)).where(t.lines.c.room_id == room_id)
    return int(conn.execute(q).scalar() or 0)


def eligible_humans(conn: Connection, persona: str, humans: list[int]) -> list[int]:
    """Humans the persona may write about: memory on, and this persona not muted."""
    if not humans:
        return []
    on = set(
        conn.execute(
            select(t.users.c.id).where(t.users.c.id.in_(humans), t.users.c.memory_on == 1)
        ).scalars()
    )
    muted = set(
        conn.execute(
            select(t.persona_memory_mute.c.user_id).where(
                t.persona_memory_mute.c.persona == persona,
                t.persona_memory_mute.c.user_id.in_(humans),
            )
        ).scalars()
    )
    return sorted(u for u in humans if u in on and u not in muted)


def begin_spell(conn: Connection, persona: str, room_id: str) -> Spell | None:
    """The spell for `persona` in `room_id` now, or None when there are no new lines.

    A spell that must not reach a model comes back with `skipped` set: it still travels to the
    commit, which advances the cursor so those lines are never mined later (a kit unmounted
    tomorrow must not turn yesterday's role-play into facts).
    """
    room = load_room(conn, room_id)
    after = cursor(conn, persona, room_id)
    last = last_line_id(conn, room_id)
    if last <= after:
        return None
    _, humans = members(conn, room_id)
    present = eligible_humans(conn, persona, humans)
    spell = Spell(persona, room_id, after, last, present=present, witnessed=humans)
    if room.incognito:
        spell.skipped = "incognito room"
    elif room.kit_mounted:
        spell.skipped = "kit mounted (role-play)"
    elif not present:
        spell.skipped = "no human present who lets this persona remember"
    return spell


def load_slice(conn: Connection, spell: Spell) -> list[Line]:
    """The transcript lines of the spell, oldest first, with their ids (for evidence)."""
    rows = conn.execute(
        select(t.lines)
        .where(
            t.lines.c.room_id == spell.room_id,
            t.lines.c.id > spell.after_line_id,
            t.lines.c.id <= spell.last_line_id,
        )
        .order_by(t.lines.c.id)
    ).mappings()
    return [Line(r["id"], r["room_id"], r["speaker"], r["text"], r["created"]) for r in rows]


def names(conn: Connection, user_ids: list[int]) -> dict[int, str]:
    if not user_ids:
        return {}
    rows = conn.execute(select(t.users.c.id, t.users.c.name).where(t.users.c.id.in_(user_ids)))
    return {int(i): n for i, n in rows}


def persona_name(conn: Connection, persona: str) -> str:
    return persona_names(conn, [persona])[persona]
