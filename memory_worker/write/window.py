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
from dataclasses import replace

from sqlalchemy import Connection

from memory_worker.core import labels
from memory_worker.core import settings as settings_mod
from memory_worker.core.audience import Consent, Members, RoomAudience, Scope
from memory_worker.core.constants import LINE_MAX_CHARS
from memory_worker.core.labels import Label, Stamp
from memory_worker.core.rows import Line, Room, Spell
from memory_worker.storage import rooms, stamps
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


def _stamped(
    conn: Connection, persona: str, room_id: str, found: Sequence[tuple[int, str, int]]
) -> list[Stamp]:
    """The persona's stamps of these lines (id, ...; oldest first), as the store stamped them."""
    if not found:
        return []
    got = stamps.between(conn, persona, room_id, found[0][0] - 1, found[-1][0])
    return [got.get(line[0], labels.UNSTAMPED) for line in found]


def next_window(
    conn: Connection, persona: str, room_id: str, after: int
) -> tuple[int, int, Label, frozenset[int]]:
    """(first, last) line ids of the next spell's window after line `after` ((0, 0): no new
    lines), its label and who heard it. It ends before the first line whose stamp has another
    label or other humans (`labels.one_label_end`): every line of a spell is witnessed by the
    same humans, and every call sees lines of one label."""
    s = settings_mod.current()
    found = rooms.line_sizes(conn, room_id, after, s.spell_max_lines)
    if not found:
        return 0, 0, labels.NOBODY, frozenset()
    stamped = _stamped(conn, persona, room_id, found)
    end = labels.one_label_end([(x[0], st) for x, st in zip(found, stamped, strict=True)])
    kept = [x for x in found if end is None or x[0] <= end]
    sizes = [(i, line_chars(i, who, n)) for i, who, n in kept]
    last = window_end(sizes, s.spell_max_lines, s.spell_max_chars)
    window = [st for x, st in zip(found, stamped, strict=True) if x[0] <= last]
    return found[0][0], last, labels.window_label(window), labels.window_heard(window)


def begin_spell(
    conn: Connection, persona: str, room_id: str, members: Sequence[int] = ()
) -> Spell | None:
    """The spell for `persona` in `room_id` now, or None when there are no new lines (or no
    such room).

    The window's readable lines all have the same stamp (`labels.one_label_end`): the spell's
    `witnessed` are the room's humans when they were said, and `present` those of its label
    who let the persona remember them now — the humans its rows may ever reach.

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
    if ctx.humans != sorted(set(members)):  # every member's switches, now we know them
        ctx = spell_context(conn, persona, room_id, ctx.humans) or ctx
    _, last, label, heard = next_window(conn, persona, room_id, ctx.cursor)
    if last <= ctx.cursor:
        return None
    humans = sorted(heard)  # the window's witnesses: the room's humans when it was said
    present = ctx.eligible(humans if label is None else sorted(label))
    spell = Spell(
        persona,
        room_id,
        ctx.cursor,
        last,
        present=present,
        witnessed=humans,
        label=labels.to_json(label),
    )
    if ctx.room.incognito:
        spell.skipped = "incognito room"
    elif label == labels.NOBODY and ctx.room.kit_mounted:
        spell.skipped = "kit mounted (role-play)"
    elif label == labels.NOBODY:
        spell.skipped = "no line said while anyone let this persona remember"
    elif not present:
        spell.skipped = "no human present who lets this persona remember"
    return spell


def load_slice(conn: Connection, spell: Spell) -> list[Line]:
    """The transcript lines of the spell that may reach its model, oldest first, with their
    ids (for evidence): those its persona's stamp says are readable — none said before the
    persona joined, while a kit was mounted, by a human who did not let the persona remember
    them then, or by a persona with such a line in view."""
    found = rooms.lines_between(conn, spell.room_id, spell.after_line_id, spell.last_line_id)
    got = stamps.between(
        conn, spell.persona, spell.room_id, spell.after_line_id, spell.last_line_id
    )
    return [line for line in found if got.get(line.id, labels.UNSTAMPED).readable]


def slice_of(conn: Connection, spell: Spell) -> list[Line]:
    """What the spell's model is shown (`load_slice`): a name the benchmarks and tests use."""
    return load_slice(conn, spell)


def stamped_spell(conn: Connection, spell: Spell) -> Spell:
    """The spell with its label and witnesses as the store stamped its lines — the commit's
    own reading, so nothing the chain carried decides either: who heard its lines, and the
    meet of the labels of those its model may have read."""
    got = stamps.between(
        conn, spell.persona, spell.room_id, spell.after_line_id, spell.last_line_id
    )
    found = [got[i] for i in sorted(got)]
    label = labels.window_label(found)
    return replace(spell, witnessed=sorted(labels.window_heard(found)), label=labels.to_json(label))


def spell_scope(spell: Spell, room: Room) -> Scope:
    """What every model call of the spell may be shown, and every row its router may change:
    rows whose audience holds the call's label (docs/design.md §11.2, §12). It is the block's
    own rule (`scope_for`, the proven scope) for the spell's room with all its witnesses
    present — each of them hears whatever a row it writes may say — and the humans of its
    label allowing: a world row shows only when all of them are in its audience, a row about
    a human only in their private chat, and a public call (dispatches only) sees public rows
    alone."""
    witnesses = frozenset(spell.witnessed)
    label = labels.from_json(spell.label)
    allowing = frozenset() if label is None else label & frozenset(spell.present)
    audience = RoomAudience(
        room,
        witnesses,
        Members(witnesses, frozenset({spell.persona})),
        Consent(memory_on=dict.fromkeys(allowing, True)),
    )
    return audience.scope(spell.persona)
