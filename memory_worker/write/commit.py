"""The commit (docs/design.md §2.4): one transaction per spell, idempotent, never deletes.

ADD inserts; UPDATE inserts the new row and closes the neighbour (`valid_to`, `closed_by`);
CLOSE sets `valid_to`; NONE writes nothing. The persona's cursor advances in the same
transaction, and the outcome is recorded in `spells` keyed by (persona, room, last line): a
second run finds it and returns the same row ids; a spell whose lines the cursor already
covers changes nothing. The toasts are written here too (the outbox), so rows never exist
without their toast; the commit task tells them right after (`tasks.delivery`). Run it
inside `store.writer(persona)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection

from memory_worker.core import labels, provenance, toasts
from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.labels import Label
from memory_worker.core.rows import (
    Candidate,
    Decision,
    Room,
    Spell,
    concerned,
    concerns,
)
from memory_worker.core.vectors import from_b64
from memory_worker.storage import memories, notices, rooms, spell_views, spells, users
from memory_worker.write import copies, extract, guards, route, view, window

# Outcomes a re-run must not touch. 'covered': a newer spell had already read every line.
FINAL = ("committed", "skipped", "covered")


@dataclass(frozen=True)
class Outcome:
    status: str  # 'committed' | 'skipped' | 'covered' | 'parked' | 'stale' | 'foreign'
    row_ids: list[int]
    closed_ids: list[int]


def commit_spell(conn: Connection, spell: Spell, *, now: str, today: str) -> Outcome:
    """Apply the spell's decisions, or return 'stale' when the open rows moved under it."""
    done = _recorded(conn, spell)
    if done is not None:
        return done
    if not _lines_are_here(conn, spell):
        return Outcome("foreign", [], [])
    # Who heard the spell's lines and their label, as the store stamped them: nothing the
    # message carries decides either (docs/design.md §12).
    spell = window.stamped_spell(conn, spell)
    read_through = spells.cursor(conn, spell.persona, spell.room_id)
    without_rows = _without_rows(conn, spell, read_through, now)
    if without_rows is not None:
        return without_rows
    plan = _plan(conn, spell, read_through, today)
    if plan is None:
        return Outcome("stale", [], [])
    written = _apply(conn, spell, plan, now, today)
    _advance_cursor(conn, spell, now)
    spells.record(conn, spell, "committed", None, written.row_ids, now)
    toasted = [i for i in written.row_ids if i not in written.untold]
    _post_toasts(conn, spell, plan.room, toasted, now)
    return Outcome("committed", written.row_ids, written.closed)


def _without_rows(conn: Connection, spell: Spell, read_through: int, now: str) -> Outcome | None:
    """The outcomes that write no row, recorded: 'covered', 'parked', 'skipped'; None for a
    spell whose decisions are to be applied.

    Order is part of exactly-once: lines the cursor already covers were read by a newer
    spell, whose decisions stand. A late spell (a retry delay, a redelivery) changes nothing
    for them — never reopens or re-adds what that spell closed — and toasts nothing."""
    if read_through >= spell.last_line_id:
        why = f"read by a newer spell (cursor {read_through})"
        spells.record(conn, spell, "covered", why, [], now)
        return Outcome("covered", [], [])
    if spell.parked:
        spells.record(conn, spell, "parked", spell.parked, [], now)
        return Outcome("parked", [], [])
    if spell.skipped:
        _advance_cursor(conn, spell, now)
        spells.record(conn, spell, "skipped", spell.skipped, [], now)
        return Outcome("skipped", [], [])
    return None


@dataclass(frozen=True)
class _Plan:
    """What the spell's decisions are applied against, read in the commit's transaction."""

    candidates: list[Candidate]
    decisions: list[Decision]  # those citing a line the cursor has not passed
    room: Room
    shown: dict[int, memories.OpenRow]  # the open rows the router saw: only these may close
    reach: Label  # who the new rows may reach at most
    capped: set[int]  # id() of the candidates today's cap lets through
    named: dict[int, list[int]]  # id(candidate) → the humans its text names
    same: copies.Copies  # open rows of the same sentence


def _plan(conn: Connection, spell: Spell, read_through: int, today: str) -> _Plan | None:
    """The spell's decisions and what they are checked against; None when the open rows moved
    since the router saw them (stale: route again)."""
    candidates = [Candidate.from_json(c) for c in spell.candidates]
    decisions = [
        d
        for d in (Decision.from_json(d) for d in spell.decisions)
        if _cites_unread(candidates[d.candidate], read_through)
    ]
    room = rooms.load_room(conn, spell.room_id)
    subjects = {c.subject for c in candidates}
    cited = sorted({d.old_row_id for d in decisions if d.old_row_id is not None})
    shown = view.shown(conn, spell, window.spell_scope(spell, room), subjects, cited)
    if shown is None:
        return None
    # Who the new rows may reach: at most the label of the calls that wrote them — the
    # humans who heard every line they read, with their switches then, as the store stamped
    # the lines (`window.stamped_spell`) — and of those the ones who still let the persona
    # remember them. Never from what the model wrote or cited.
    label = labels.meet(labels.from_json(spell.label), _revoked(conn, spell))
    allowing = set(users.eligible_humans(conn, spell.persona, spell.present))
    already = extract.rows_today(conn, spell.persona, today, spell.present)
    writing = [candidates[d.candidate] for d in decisions if d.event in ("ADD", "UPDATE")]
    allowed, _ = extract.cap(writing, already)
    return _Plan(
        candidates=candidates,
        decisions=decisions,
        room=room,
        shown=shown,
        reach=None if label is None else label & frozenset(allowing),
        capped={id(c) for c in allowed},
        named=_named(conn, spell, writing),
        same=copies.Copies.load(conn, spell.persona, candidates),
    )


@dataclass
class _Written:
    """What the decisions wrote so far."""

    row_ids: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    # rows whose human was told of the same sentence already (a narrower copy folds into them)
    untold: set[int] = field(default_factory=set)


def _apply(conn: Connection, spell: Spell, plan: _Plan, now: str, today: str) -> _Written:
    """Each decision in order: ADD and UPDATE write (`_write`), CLOSE closes a row it may."""
    written = _Written()
    for d in plan.decisions:
        c = plan.candidates[d.candidate]
        audience = _audience(c, plan.reach)
        if audience == labels.NOBODY:
            continue  # nobody left who heard it and lets the persona remember it
        if d.event in ("ADD", "UPDATE"):
            _write(conn, spell, plan, d, audience, written, now, today)
        elif d.event == "CLOSE" and (old := d.old_row_id) is not None:
            if _may_change(plan.shown, old, c, audience):
                _close(conn, plan, written, old, c.valid_from or today, None)
    return written


def _write(
    conn: Connection,
    spell: Spell,
    plan: _Plan,
    d: Decision,
    audience: Label,
    written: _Written,
    now: str,
    today: str,
) -> None:
    """An ADD or UPDATE: the new row, unless over today's cap or already open for everyone it
    reaches; narrower copies of the same sentence fold into it; an UPDATE closes its old row."""
    c = plan.candidates[d.candidate]
    if id(c) not in plan.capped:
        return  # over today's cap
    formed = copies.formed_with(c.subject, audience, frozenset(spell.witnessed))
    old = d.old_row_id
    replaces = d.event == "UPDATE" and old is not None and _may_change(plan.shown, old, c, audience)
    found = plan.same.find(c, formed, plan.shown[old].text if replaces and old else None)
    if found.held:
        return  # the same sentence is open already, for everyone this one reaches
    new_id = _insert_row(conn, spell, c, now, plan.named[id(c)], audience)
    written.row_ids.append(new_id)
    plan.same.add(c, formed, new_id, found.narrower)
    for copy in found.narrower:  # one memory, not two: its human was told already
        _close(conn, plan, written, copy.id, c.valid_from or today, new_id)
        notices.add_row(conn, copy.id, new_id)
        if c.subject != SUBJECT_WORLD:
            written.untold.add(new_id)
    if replaces and old is not None and old in plan.shown:
        _close(conn, plan, written, old, c.valid_from or today, new_id)


def _close(
    conn: Connection,
    plan: _Plan,
    written: _Written,
    row_id: int,
    when: str,
    closed_by: int | None,
) -> None:
    """Close an open row (`valid_to` = when, `closed_by`); it is no longer one the spell may
    change."""
    memories.close(conn, row_id, when, closed_by)
    plan.shown.pop(row_id, None)
    written.closed.append(row_id)


def _audience(c: Candidate, reach: Label) -> Label:
    """Who a candidate's row may reach, from the call's label alone (`reach`: the label, of
    it those who still allow the persona): a world row's audience is the label itself (public
    only when every line the call read was a dispatch); a row about a human, or a promise to
    one, reaches that human when they are in it. `NOBODY`: it is not written."""
    if c.subject == SUBJECT_WORLD:
        return reach
    who = concerns(c.subject, c.counterpart)
    return (
        frozenset({who})
        if who is not None and labels.within(frozenset({who}), reach)
        else labels.NOBODY
    )


def _revoked(conn: Connection, spell: Spell) -> Label:
    """The meet of the audiences, as they are now, of every row the spell's calls were shown
    (`spell_views`, noted by the steps before each call; read under the writer lock): a row
    deleted since gives nobody (no one may learn from this spell what it saw), one narrowed
    its narrower audience. Nothing noted: nobody."""
    audiences = spell_views.audiences(conn, spell)
    if audiences is None:
        return labels.NOBODY
    return labels.meet_all(labels.row_audience(*a) for a in audiences)


def _named(conn: Connection, spell: Spell, writing: list[Candidate]) -> dict[int, list[int]]:
    """id(candidate) → the humans its text names besides whom it concerns (`guards.humans_named`):
    the room's humans and anyone the store knows, by any distinctive part of their name."""
    if not writing:
        return {}
    people = users.user_names(conn, sorted(set(spell.witnessed)))
    people |= users.people_named_in(conn, [c.text for c in writing])
    return {
        id(c): sorted(guards.humans_named(c.text, c.subject, c.counterpart, people))
        for c in writing
    }


def _cites_unread(c: Candidate, read_through: int) -> bool:
    """A candidate whose every evidence line a newer spell already read is that spell's call."""
    return not c.evidence or max(c.evidence) > read_through


def _post_toasts(
    conn: Connection,
    spell: Spell,
    room: Room,
    row_ids: list[int],
    now: str,
) -> None:
    """The outbox: one toast per human the new rows concern, in the commit's transaction, so
    rows are never written without their toast; the commit task delivers them after."""
    if not row_ids:
        return
    by_id = memories.rows_by_id(conn, sorted(row_ids))
    rows = [by_id[i] for i in row_ids if i in by_id]
    humans = {u for r in rows for u in concerned(r.subject, r.counterpart, r.private_to)}
    names = users.user_names(conn, sorted(humans))
    persona_name = users.persona_name(conn, spell.persona)
    in_group = None
    if not room.is_private_chat():  # the toast says whether it may follow them into groups
        private = users.stays_private(conn, sorted(names), [spell.persona])
        follow = settings_mod.current().memory_scope == "follow"
        in_group = {u: follow and (u, spell.persona) not in private for u in names}
    for toast in toasts.toasts(persona_name, rows, names, in_group=in_group):
        notices.post(
            conn,
            user_id=toast.user_id,
            persona=spell.persona,
            room_id=spell.room_id,
            spell_key=spell.key,
            text=toast.text,
            row_ids=toast.row_ids,
            now=now,
        )


def _may_change(
    shown: dict[int, memories.OpenRow], row_id: int | None, c: Candidate, audience: Label
) -> bool:
    """The router may UPDATE or CLOSE only an open row it was shown, about what `c` is about,
    and a world row only when its audience is the new row's (`provenance.may_change`)."""
    row = None if row_id is None else shown.get(row_id)
    if row is None or not route.same_concern(row, c):
        return False
    target = labels.from_json(row.private_to)
    return row.subject != SUBJECT_WORLD or provenance.may_change(target, audience)


def _recorded(conn: Connection, spell: Spell) -> Outcome | None:
    got = spells.outcome(conn, spell)
    if got is None or got[0] not in FINAL:
        return None
    return Outcome(got[0], got[1], [])


def _lines_are_here(conn: Connection, spell: Spell) -> bool:
    """A spell's last line must be a line of its room in this store. A message can outlive the
    store it was read from (a store restored from a backup, or replaced, under a queue that
    kept its messages): committed, its cursor would jump past lines not yet said here, and
    they would never be read. Such a spell is neither applied nor recorded — its key may
    yet name a real spell of this store — and the room's own lines get spells of their own."""
    line = rooms.lines_by_id(conn, [spell.last_line_id]).get(spell.last_line_id)
    return line is not None and line.room_id == spell.room_id


def _advance_cursor(conn: Connection, spell: Spell, now: str) -> None:
    """Move the cursor past the spell's lines; parked spells over them need no operator now."""
    spells.advance_cursor(conn, spell.persona, spell.room_id, spell.last_line_id, now)
    spells.resolve_parked(conn, spell.persona, spell.room_id, spell.last_line_id)
    spell_views.forget(conn, spell.persona, spell.room_id, spell.after_line_id)


def _insert_row(
    conn: Connection,
    spell: Spell,
    c: Candidate,
    now: str,
    named: list[int],
    audience: Label,
) -> int:
    embedding = from_b64(c.embedding) if c.embedding else None
    new_id = memories.insert_row(
        conn,
        persona=spell.persona,
        room_id=spell.room_id,
        witnessed=spell.witnessed,
        candidate=c,
        embedding=embedding,
        now=now,
        named=named,
    )
    if c.subject == SUBJECT_WORLD and audience is not None:
        memories.set_audience(conn, new_id, audience)
    return new_id
