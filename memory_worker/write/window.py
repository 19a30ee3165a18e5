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

from memory_worker.core import labels
from memory_worker.core import settings as settings_mod
from memory_worker.core.audience import Consent, Members, RoomAudience, Scope
from memory_worker.core.constants import LINE_MAX_CHARS
from memory_worker.core.labels import Label, LineTime
from memory_worker.core.rows import Line, Room, Spell
from memory_worker.storage import rooms, switches
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


def line_time(conn: Connection, persona: str, ctx: SpellContext) -> LineTime:
    """How the lines after the cursor are judged: the room's members, when they and the
    persona joined, and the switches of the humans `ctx` read, with their history since."""
    humans = sorted(ctx.memory_on)
    found = switches.flips(conn, persona, ctx.room.id, humans, ctx.cursor)
    return LineTime(
        persona=persona,
        joined={u: ctx.joined.get(u, 0) for u in ctx.humans},
        persona_since=ctx.persona_since,
        memory_on=ctx.memory_on,
        muted=ctx.muted,
        kit_mounted=ctx.room.kit_mounted,
        memory_flips=found.memory_on,
        mute_flips=found.muted,
        kit_flips=found.kit,
    )


def next_window(
    conn: Connection, room_id: str, after: int, ctx: SpellContext, time: LineTime
) -> tuple[int, int, Label]:
    """(first, last) line ids of the next spell's window after line `after` ((0, 0): no new
    lines) and its label. It ends before the next member joined (`SpellContext.next_join`)
    and before the first line whose label differs (`labels.one_label_end`): every line of a
    spell is witnessed by the same humans, and every call sees lines of one label."""
    s = settings_mod.current()
    found = rooms.line_sizes(conn, room_id, after, s.spell_max_lines)
    if not found:
        return 0, 0, labels.NOBODY
    first = found[0][0]
    join = ctx.next_join(first)
    if join is not None:
        found = [x for x in found if x[0] <= join]
    end = labels.one_label_end(time, [(i, who) for i, who, _ in found])
    found = [x for x in found if end is None or x[0] <= end]
    sizes = [(i, line_chars(i, who, n)) for i, who, n in found]
    last = window_end(sizes, s.spell_max_lines, s.spell_max_chars)
    label = labels.window_label(time, [(i, who) for i, who, _ in found if i <= last])
    return first, last, label


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
    if ctx.humans != sorted(set(members)):  # every member's switches, now we know them
        ctx = spell_context(conn, persona, room_id, ctx.humans) or ctx
    time = line_time(conn, persona, ctx)
    first, last, label = next_window(conn, room_id, ctx.cursor, ctx, time)
    if last <= ctx.cursor:
        return None
    humans = ctx.witnesses(first)  # the window's witnesses: members who had joined by then
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


def load_slice(conn: Connection, spell: Spell, time: LineTime) -> list[Line]:
    """The transcript lines of the spell that may reach its model, oldest first, with their
    ids (for evidence): none said before the persona joined, while a kit was mounted, or by
    a human who did not let the persona remember them then (`LineTime.readable`)."""
    found = rooms.lines_between(conn, spell.room_id, spell.after_line_id, spell.last_line_id)
    return [line for line in found if time.readable(line.id, line.speaker)]


def slice_of(conn: Connection, spell: Spell) -> list[Line]:
    """`load_slice` with the room read afresh: what the spell's model would be shown now."""
    ctx = spell_context(conn, spell.persona, spell.room_id, spell.witnessed)
    return [] if ctx is None else load_slice(conn, spell, line_time(conn, spell.persona, ctx))


def spell_label(conn: Connection, spell: Spell) -> Label:
    """The label of the spell's lines read again from the store — the commit's own reading,
    so nothing the chain carried can widen it — met with the label it carried."""
    ctx = spell_context(conn, spell.persona, spell.room_id, spell.witnessed)
    if ctx is None:
        return labels.NOBODY
    time = line_time(conn, spell.persona, ctx)
    found = rooms.line_sizes(
        conn, spell.room_id, spell.after_line_id, spell.last_line_id - spell.after_line_id
    )
    lines = [(i, who) for i, who, _ in found if i <= spell.last_line_id]
    return labels.meet(labels.window_label(time, lines), labels.from_json(spell.label))


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
