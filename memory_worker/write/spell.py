"""Begin a spell: the lines since a persona's cursor, who is present, and the skip rules.

The skip rules are code, checked before any model call (DESIGN.md "The write path"): an
incognito room writes nothing; a room with a kit mounted (role-play) is skipped; humans with
`memory_on = 0` or who muted this persona are dropped from the present set the model sees.

A spell is bounded (DESIGN.md "Spells are bounded"): it takes the oldest lines after the cursor
up to `spell_max_lines` lines and `spell_max_chars` prompt characters. A backlog is mined window
by window, each its own spell that moves the cursor when it commits: a room can be behind,
never stuck.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import LINE_MAX_CHARS
from memory_worker.core.rows import Line, Spell
from memory_worker.storage import rooms
from memory_worker.storage.spell_context import spell_context


def line_chars(line_id: int, speaker: str, text_chars: int) -> int:
    """What one line costs in the prompt: "[id] speaker: text" with the text cut as shown."""
    return len(f"[{line_id}] {speaker}: \n") + min(text_chars, LINE_MAX_CHARS)


def window_end(sizes: Sequence[tuple[int, int]], max_lines: int, max_chars: int) -> int:
    """The last line id of the window over `sizes` — (line id, prompt chars), oldest first:
    at most `max_lines` lines and `max_chars` characters, and always at least one line."""
    total, end = 0, sizes[0][0]
    for n, (line_id, chars) in enumerate(sizes[:max_lines]):
        if n and total + chars > max_chars:
            break
        total += chars
        end = line_id
    return end


def next_window(conn: Connection, room_id: str, after: int) -> int:
    """The last line id of the next spell's window after line `after` (0: no new lines)."""
    s = settings_mod.current()
    found = rooms.line_sizes(conn, room_id, after, s.spell_max_lines)
    sizes = [(i, line_chars(i, who, n)) for i, who, n in found]
    return window_end(sizes, s.spell_max_lines, s.spell_max_chars) if sizes else 0


def begin_spell(
    conn: Connection, persona: str, room_id: str, members: Sequence[int] = ()
) -> Spell | None:
    """The spell for `persona` in `room_id` now, or None when there are no new lines (or no
    such room).

    `members`: the room's humans as the caller last saw them (the fan-out has just read them).
    Their switches come with the room in one read; when the room's members turn out to be
    others, theirs are read again, so a stale guess costs a statement, never a wrong present
    set.

    A spell that must not reach a model comes back with `skipped` set: it still travels to the
    commit, which advances the cursor so those lines are never mined later (a kit unmounted
    tomorrow must not turn yesterday's role-play into facts).
    """
    ctx = spell_context(conn, persona, room_id, members)
    if ctx is None:
        return None
    last = next_window(conn, room_id, ctx.cursor)
    if last <= ctx.cursor:
        return None
    humans = ctx.humans
    if humans and humans != sorted(set(members)):  # the members' switches, now we know them
        ctx = spell_context(conn, persona, room_id, humans) or ctx
    present = ctx.eligible(humans)
    spell = Spell(persona, room_id, ctx.cursor, last, present=present, witnessed=humans)
    if ctx.room.incognito:
        spell.skipped = "incognito room"
    elif ctx.room.kit_mounted:
        spell.skipped = "kit mounted (role-play)"
    elif not present:
        spell.skipped = "no human present who lets this persona remember"
    return spell


def load_slice(conn: Connection, spell: Spell) -> list[Line]:
    """The transcript lines of the spell, oldest first, with their ids (for evidence)."""
    return rooms.lines_between(conn, spell.room_id, spell.after_line_id, spell.last_line_id)
