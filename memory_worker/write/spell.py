"""Begin a spell: the lines since a persona's cursor, who is present, and the skip rules.

The skip rules are code, checked before any model call (DESIGN.md "The write path"): an
incognito room writes nothing; a room with a kit mounted (role-play) is skipped; humans with
`memory_on = 0` or who muted this persona are dropped from the present set the model sees.
"""

from __future__ import annotations

from sqlalchemy import Connection

from memory_worker.rows import Line, Spell
from memory_worker.storage import rooms, spells, users


def begin_spell(conn: Connection, persona: str, room_id: str) -> Spell | None:
    """The spell for `persona` in `room_id` now, or None when there are no new lines.

    A spell that must not reach a model comes back with `skipped` set: it still travels to the
    commit, which advances the cursor so those lines are never mined later (a kit unmounted
    tomorrow must not turn yesterday's role-play into facts).
    """
    room = rooms.load_room(conn, room_id)
    after = spells.cursor(conn, persona, room_id)
    last = rooms.last_line_id(conn, room_id)
    if last <= after:
        return None
    _, humans = rooms.members(conn, room_id)
    present = users.eligible_humans(conn, persona, humans)
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
    return rooms.lines_between(conn, spell.room_id, spell.after_line_id, spell.last_line_id)
