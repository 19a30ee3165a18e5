"""The commit (DESIGN.md "commit"): one transaction per spell, idempotent, never deletes.

ADD inserts; UPDATE inserts the new row and closes the neighbour (`valid_to`, `closed_by`);
CLOSE sets `valid_to`; NONE writes nothing. The persona's cursor advances in the same
transaction, and the outcome is recorded in `spells` keyed by (persona, room, last line): a
second run finds it and returns the same row ids; a spell whose lines the cursor already
covers changes nothing. The toasts are written here too (the outbox), so rows never exist
without their toast. Run it inside `store.writer(persona)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from memory_worker.core import toasts
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.rows import Candidate, Decision, Spell, concerned
from memory_worker.core.vectors import from_b64
from memory_worker.storage import memories, notices, rooms, spells, users
from memory_worker.write import extract, guards, route

# Outcomes a re-run must not touch. 'covered': a newer spell had already read every line.
FINAL = ("committed", "skipped", "covered")


@dataclass(frozen=True)
class Outcome:
    status: str  # 'committed' | 'skipped' | 'covered' | 'parked' | 'stale'
    row_ids: list[int]
    closed_ids: list[int]


def commit_spell(conn: Connection, spell: Spell, *, now: str, today: str) -> Outcome:
    """Apply the spell's decisions, or return 'stale' when the open rows moved under it."""
    done = _recorded(conn, spell)
    if done is not None:
        return done
    # Order is part of exactly-once: lines the cursor already covers were read by a newer
    # spell, whose decisions stand. A late spell (a retry delay, a redelivery) changes nothing
    # for them — never reopens or re-adds what that spell closed — and toasts nothing.
    read_through = spells.cursor(conn, spell.persona, spell.room_id)
    if read_through >= spell.last_line_id:
        spells.record(
            conn, spell, "covered", f"read by a newer spell (cursor {read_through})", [], now
        )
        return Outcome("covered", [], [])
    if spell.parked:
        spells.record(conn, spell, "parked", spell.parked, [], now)
        return Outcome("parked", [], [])
    if spell.skipped:
        _advance_cursor(conn, spell, now)
        spells.record(conn, spell, "skipped", spell.skipped, [], now)
        return Outcome("skipped", [], [])

    candidates = [Candidate.from_json(c) for c in spell.candidates]
    decisions = [
        d
        for d in (Decision.from_json(d) for d in spell.decisions)
        if _cites_unread(candidates[d.candidate], read_through)
    ]
    subjects = {c.subject for c in candidates}
    rows = memories.open_rows(conn, spell.persona, spell.present, subjects)
    if spell.candidates and route.fingerprint(rows) != spell.seen_open_rows:
        return Outcome("stale", [], [])

    open_texts = {(r.subject, r.text.strip().lower()): r.id for r in rows}
    shown = {r.id: r for r in rows}  # only rows the audience allows can be closed
    already = extract.rows_today(conn, spell.persona, today, spell.present)
    writing = [d for d in decisions if d.event in ("ADD", "UPDATE")]
    allowed, _ = extract.cap([candidates[d.candidate] for d in writing], already)
    allowed_ids = {id(c) for c in allowed}
    cited = {i for c in candidates if c.subject == SUBJECT_WORLD for i in c.evidence}
    speaker_of = rooms.speakers(conn, spell.room_id, cited)
    named = _named(conn, spell, [candidates[d.candidate] for d in writing])

    row_ids: list[int] = []
    closed: list[int] = []
    for d in decisions:
        c = candidates[d.candidate]
        if d.event in ("ADD", "UPDATE"):
            if id(c) not in allowed_ids or (c.subject, c.text.lower()) in open_texts:
                continue  # over today's cap, or the very same sentence is already open
            old = d.old_row_id
            replaces = d.event == "UPDATE" and old is not None and _may_change(shown, old, c)
            sources = guards.cited_humans(c.evidence, speaker_of)
            private_to = None
            if c.subject == SUBJECT_WORLD:
                held = shown[old].private_to if replaces and old is not None else None
                private_to = _private_to(held, sources, replaces)
            new_id = _insert_row(conn, spell, c, now, named[id(c)], private_to)
            if c.subject == SUBJECT_WORLD:
                memories.add_sources(conn, new_id, sources)
            row_ids.append(new_id)
            open_texts[(c.subject, c.text.lower())] = new_id
            if replaces and old is not None:
                memories.close(conn, old, c.valid_from or today, new_id)
                shown.pop(old)
                closed.append(old)
        elif d.event == "NONE" and (old := d.old_row_id) is not None:
            _confirm_world(conn, shown, old, c, guards.cited_humans(c.evidence, speaker_of))
        elif (
            d.event == "CLOSE" and (old := d.old_row_id) is not None and _may_change(shown, old, c)
        ):
            memories.close(conn, old, c.valid_from or today, None)
            shown.pop(old)
            closed.append(old)
    _advance_cursor(conn, spell, now)
    spells.record(conn, spell, "committed", None, row_ids, now)
    _post_toasts(conn, spell, row_ids, now)
    return Outcome("committed", row_ids, closed)


def _named(conn: Connection, spell: Spell, writing: list[Candidate]) -> dict[int, list[int]]:
    """id(candidate) → the humans its text names besides whom it concerns (`guards.humans_named`):
    by any form of the name for the room's humans, by whole name for anyone the store knows."""
    if not writing:
        return {}
    room_people = users.user_names(conn, sorted(set(spell.witnessed)))
    known_people = users.people_named_in(conn, [c.text for c in writing])
    return {
        id(c): sorted(
            guards.humans_named(c.text, c.subject, c.counterpart, room_people, known_people)
        )
        for c in writing
    }


def _private_to(
    held: tuple[int, ...] | None, sources: list[int], replaces: bool
) -> tuple[int, ...] | None:
    """Whom a new world row stays with: the humans whose lines it cites (DESIGN.md "Learned
    from a person, it stays with that person"); replacing a row private to others, public
    once a human outside them states it (`guards.private_to_after`)."""
    if replaces and held is not None:
        return guards.private_to_after(held, sources)
    return tuple(sources) or None


def _confirm_world(
    conn: Connection,
    shown: dict[int, memories.OpenRow],
    row_id: int,
    c: Candidate,
    sources: list[int],
) -> None:
    """The router said a world row it was shown already says what `c` says: the humans whose
    lines `c` cites become its sources too, and a human it was not private to makes it public."""
    row = shown.get(row_id)
    if row is None or row.subject != SUBJECT_WORLD or c.subject != SUBJECT_WORLD or not sources:
        return
    memories.add_sources(conn, row_id, sources, keep_existing=True)
    after = guards.private_to_after(row.private_to, sources)
    if after != row.private_to:
        memories.set_private_to(conn, row_id, after)


def _cites_unread(c: Candidate, read_through: int) -> bool:
    """A candidate whose every evidence line a newer spell already read is that spell's call."""
    return not c.evidence or max(c.evidence) > read_through


def _post_toasts(conn: Connection, spell: Spell, row_ids: list[int], now: str) -> None:
    """The outbox: one toast per human the new rows concern, in the commit's transaction, so
    rows are never written without their toast; `notify_toast` delivers them after."""
    if not row_ids:
        return
    rows = list(memories.rows_by_id(conn, row_ids).values())
    humans = sorted({u for r in rows for u in concerned(r.subject, r.counterpart, r.sources)})
    names = users.user_names(conn, humans)
    persona_name = users.persona_name(conn, spell.persona)
    for toast in toasts.toasts(persona_name, rows, names):
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


def _may_change(shown: dict[int, memories.OpenRow], row_id: int, c: Candidate) -> bool:
    """The router may UPDATE or CLOSE only an open row it was shown, about what `c` is about."""
    row = shown.get(row_id)
    return row is not None and route.same_concern(row, c)


def _recorded(conn: Connection, spell: Spell) -> Outcome | None:
    got = spells.outcome(conn, spell)
    if got is None or got[0] not in FINAL:
        return None
    return Outcome(got[0], got[1], [])


def _advance_cursor(conn: Connection, spell: Spell, now: str) -> None:
    """Move the cursor past the spell's lines; parked spells over them need no operator now."""
    spells.advance_cursor(conn, spell.persona, spell.room_id, spell.last_line_id, now)
    spells.resolve_parked(conn, spell.persona, spell.room_id, spell.last_line_id)


def _insert_row(
    conn: Connection,
    spell: Spell,
    c: Candidate,
    now: str,
    named: list[int],
    private_to: tuple[int, ...] | None,
) -> int:
    embedding = from_b64(c.embedding) if c.embedding else None
    return memories.insert_row(
        conn,
        persona=spell.persona,
        room_id=spell.room_id,
        witnessed=spell.witnessed,
        candidate=c,
        embedding=embedding,
        now=now,
        named=named,
        private_to=private_to,
    )
