"""The commit (docs/design.md §2.4): one transaction per spell, idempotent, never deletes.

ADD inserts; UPDATE inserts the new row and closes the neighbour (`valid_to`, `closed_by`);
CLOSE sets `valid_to`; NONE writes nothing. The persona's cursor advances in the same
transaction, and the outcome is recorded in `spells` keyed by (persona, room, last line): a
second run finds it and returns the same row ids; a spell whose lines the cursor already
covers changes nothing. The toasts are written here too (the outbox), so rows never exist
without their toast; the commit task tells them right after (`tasks.delivery`). Run it
inside `store.writer(persona)`.

The commit is handed its plan (`write.plan`, made by the route step): it reads what it checks
in one module (`commit_checks.check`: the facts under the lock, the handed plan their upper
bound), then carries the plan out step by step, deciding nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection

from memory_worker.core import settings as settings_mod
from memory_worker.core import toasts
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.rows import Candidate, Room, Spell, concerned
from memory_worker.core.vectors import from_b64
from memory_worker.storage import memories, notices, rooms, spell_views, spells, users
from memory_worker.write import commit_checks
from memory_worker.write.plan import Plan, Step

# Outcomes a re-run must not touch. 'covered': a newer spell had already read every line.
FINAL = ("committed", "skipped", "covered")


@dataclass(frozen=True)
class Outcome:
    status: str  # 'committed' | 'skipped' | 'covered' | 'parked' | 'stale' | 'foreign'
    row_ids: list[int]
    closed_ids: list[int]


def commit_spell(conn: Connection, spell: Spell, *, now: str, today: str) -> Outcome:
    """Apply the spell's plan as the facts now let it be applied (`commit_checks.check`), or
    return 'stale' when the open rows moved under it (or it carries no plan)."""
    done = _recorded(conn, spell)
    if done is not None:
        return done
    if not _lines_are_here(conn, spell):
        return Outcome("foreign", [], [])
    read_through = spells.cursor(conn, spell.persona, spell.room_id)
    without_rows = _without_rows(conn, spell, read_through, now)
    if without_rows is not None:
        return without_rows
    # Who heard the spell's lines and their label, as the store stamped them, and every other
    # fact the plan is checked against: nothing the message carries decides any of them
    # (docs/design.md §12); the plan it carries only narrows what they allow.
    checked = commit_checks.check(conn, spell, read_through, today)
    if checked is None:
        return Outcome("stale", [], [])
    written = _apply(conn, spell, checked.plan, now, today)
    _advance_cursor(conn, spell, now)
    spells.record(conn, spell, "committed", None, written.row_ids, now)
    toasted = [i for i in written.row_ids if i not in written.untold]
    _post_toasts(conn, spell, checked.room, toasted, now)
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


@dataclass
class _Written:
    """What the decisions wrote so far."""

    row_ids: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    # rows whose human was told of the same sentence already (a narrower copy folds into them)
    untold: set[int] = field(default_factory=set)


def _apply(conn: Connection, spell: Spell, plan: Plan, now: str, today: str) -> _Written:
    """Each step as it says: an ADD or UPDATE writes its row, closes the narrower copies it
    folds (their human was told already: one memory, not two) and the row it replaces; a
    CLOSE closes its row. Nothing is decided here (`commit_checks.check` did)."""
    written = _Written()
    candidates = [Candidate.from_json(c) for c in spell.candidates]
    by_step: dict[int, int] = {}  # a step's index → the row it wrote
    for i, step in enumerate(plan.steps):
        c = candidates[step.candidate]
        when = c.valid_from or today
        if step.closes is not None:
            _close(conn, written, step.closes, when, None)
        if not step.writes:
            continue
        new_id = _insert_row(conn, spell, plan, c, now, step)
        by_step[i] = new_id
        written.row_ids.append(new_id)
        for fold in step.folds:
            copy_id = by_step.get(-1 - fold) if fold < 0 else fold
            if copy_id is None:
                continue
            _close(conn, written, copy_id, when, new_id)
            notices.add_row(conn, copy_id, new_id)
            if c.subject != SUBJECT_WORLD:
                written.untold.add(new_id)
        if step.old_row_id is not None and step.old_row_id not in step.folds:
            _close(conn, written, step.old_row_id, when, new_id)
    return written


def _close(
    conn: Connection, written: _Written, row_id: int, when: str, closed_by: int | None
) -> None:
    """Close an open row (`valid_to` = when, `closed_by`)."""
    memories.close(conn, row_id, when, closed_by)
    written.closed.append(row_id)


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
    conn: Connection, spell: Spell, plan: Plan, c: Candidate, now: str, step: Step
) -> int:
    """The step's row, witnessed by whom the store stamped as hearing the spell's lines."""
    embedding = from_b64(c.embedding) if c.embedding else None
    new_id = memories.insert_row(
        conn,
        persona=spell.persona,
        room_id=spell.room_id,
        witnessed=list(plan.witnessed),
        candidate=c,
        embedding=embedding,
        now=now,
        named=list(step.named),
    )
    if c.subject == SUBJECT_WORLD and step.audience is not None:
        memories.set_audience(conn, new_id, step.audience)
    return new_id
