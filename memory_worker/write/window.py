"""Begin a spell: the lines since a persona's cursor, who is present, and the skip rules.

The skip rules are code, checked before any model call (docs/design.md §2): an
incognito room writes nothing; a room with a kit mounted (role-play) is skipped; humans with
`memory_on = 0` or who muted this persona are dropped from the present set the model sees.

A spell is bounded (docs/design.md §10.9): it takes the oldest lines after the cursor
up to `spell_max_lines` lines and `spell_max_chars` prompt characters. A backlog is mined window
by window, each its own spell that moves the cursor when it commits: a room can be behind,
never stuck.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from memory_worker.core import settings as settings_mod
from memory_worker.core.audience import Consent, Members, RoomAudience, Scope
from memory_worker.core.constants import LINE_MAX_CHARS
from memory_worker.core.rows import Line, Room, Spell
from memory_worker.storage import rooms
from memory_worker.storage.spell_context import SpellContext, spell_context


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


def next_window(conn: Connection, room_id: str, after: int, ctx: SpellContext) -> tuple[int, int]:
    """(first, last) line ids of the next spell's window after line `after` ((0, 0): no new
    lines). It ends before the next member joined (`SpellContext.next_join`): every line of a
    spell is witnessed by the same humans."""
    s = settings_mod.current()
    found = rooms.line_sizes(conn, room_id, after, s.spell_max_lines)
    if not found:
        return 0, 0
    first = found[0][0]
    join = ctx.next_join(first)
    if join is not None:
        found = [x for x in found if x[0] <= join]
    sizes = [(i, line_chars(i, who, n)) for i, who, n in found]
    return first, window_end(sizes, s.spell_max_lines, s.spell_max_chars)


def begin_spell(
    conn: Connection, persona: str, room_id: str, members: Sequence[int] = ()
) -> Spell | None:
    """The spell for `persona` in `room_id` now, or None when there are no new lines (or no
    such room).

    The window's lines all have the same witnesses (`SpellContext.next_join`): the spell's
    `witnessed` are the members who had joined before its first line, and `present` those of
    them who let the persona remember them — the humans its rows may ever reach.

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
    first, last = next_window(conn, room_id, ctx.cursor, ctx)
    if last <= ctx.cursor:
        return None
    humans = ctx.witnesses(first)  # the window's witnesses: members who had joined by then
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


def spell_scope(spell: Spell, room: Room) -> Scope:
    """What every model call of the spell may be shown, and every row its router may change: the
    block's own rule (`scope_for`, the proven scope) for the spell's room with all its witnesses
    present — each of them hears whatever a row it writes may say — and its eligible humans
    allowing (docs/design.md §11.2). A world row shows here only when all of them are in its
    audience."""
    witnesses = frozenset(spell.witnessed)
    audience = RoomAudience(
        room,
        witnesses,
        Members(witnesses, frozenset({spell.persona})),
        Consent(memory_on=dict.fromkeys(spell.present, True)),
    )
    return audience.scope(spell.persona)
