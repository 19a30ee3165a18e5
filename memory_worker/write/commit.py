"""The commit (DESIGN.md "commit"): one transaction per spell, idempotent, never deletes.

ADD inserts; UPDATE inserts the new row and closes the neighbour (`valid_to`, `closed_by`);
CLOSE sets `valid_to`; NONE writes nothing. The persona's cursor advances in the same
transaction, and the outcome is recorded in `spells` keyed by (persona, room, last line): a
second run finds it and returns the same row ids. Run it inside `store.writer(persona)`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from memory_worker.constants import SUBJECT_WORLD
from memory_worker.rows import Candidate, Decision, Spell
from memory_worker.storage import memories, rooms, spells
from memory_worker.vectors import from_b64
from memory_worker.write import extract, guards, route

FINAL = ("committed", "skipped")  # outcomes a re-run must not touch


@dataclass(frozen=True)
class Outcome:
    status: str  # 'committed' | 'skipped' | 'parked' | 'stale'
    row_ids: list[int]
    closed_ids: list[int]


def commit_spell(conn: Connection, spell: Spell, *, now: str, today: str) -> Outcome:
    """Apply the spell's decisions, or return 'stale' when the open rows moved under it."""
    done = _recorded(conn, spell)
    if done is not None:
        return done
    if spell.parked:
        spells.record(conn, spell, "parked", spell.parked, [], now)
        return Outcome("parked", [], [])
    if spell.skipped:
        _advance_cursor(conn, spell, now)
        spells.record(conn, spell, "skipped", spell.skipped, [], now)
        return Outcome("skipped", [], [])

    candidates = [Candidate.from_json(c) for c in spell.candidates]
    decisions = [Decision.from_json(d) for d in spell.decisions]
    subjects = {c.subject for c in candidates}
    rows = memories.open_rows(conn, spell.persona, spell.present, subjects)
    if spell.candidates and route.fingerprint(rows) != spell.seen_open_rows:
        return Outcome("stale", [], [])

    open_texts = {(r.subject, r.text.strip().lower()): r.id for r in rows}
    shown = {r.id: r for r in rows}  # only rows the audience allows can be closed
    already = extract.rows_today(conn, spell.persona, today)
    writing = [d for d in decisions if d.event in ("ADD", "UPDATE")]
    allowed, _ = extract.cap([candidates[d.candidate] for d in writing], already)
    allowed_ids = {id(c) for c in allowed}
    cited = {i for c in candidates if c.subject == SUBJECT_WORLD for i in c.evidence}
    speaker_of = rooms.speakers(conn, spell.room_id, cited)

    row_ids: list[int] = []
    closed: list[int] = []
    for d in decisions:
        c = candidates[d.candidate]
        if d.event in ("ADD", "UPDATE"):
            if id(c) not in allowed_ids or (c.subject, c.text.lower()) in open_texts:
                continue  # over today's cap, or the very same sentence is already open
            new_id = _insert_row(conn, spell, c, now)
            if c.subject == SUBJECT_WORLD:
                memories.add_sources(conn, new_id, guards.cited_humans(c.evidence, speaker_of))
            row_ids.append(new_id)
            open_texts[(c.subject, c.text.lower())] = new_id
            if d.event == "UPDATE" and _may_change(shown, d.old_row_id, c):
                memories.close(conn, d.old_row_id, c.valid_from or today, new_id)
                shown.pop(d.old_row_id)
                closed.append(d.old_row_id)
        elif d.event == "CLOSE" and _may_change(shown, d.old_row_id, c):
            memories.close(conn, d.old_row_id, c.valid_from or today, None)
            shown.pop(d.old_row_id)
            closed.append(d.old_row_id)
    _advance_cursor(conn, spell, now)
    spells.record(conn, spell, "committed", None, row_ids, now)
    return Outcome("committed", row_ids, closed)


def _may_change(shown: dict[int, memories.OpenRow], row_id: int | None, c: Candidate) -> bool:
    """The router may UPDATE or CLOSE only an open row it was shown, about what `c` is about."""
    row = shown.get(row_id) if row_id is not None else None
    return row is not None and route.same_concern(row, c)


def _recorded(conn: Connection, spell: Spell) -> Outcome | None:
    got = spells.outcome(conn, spell)
    if got is None or got[0] not in FINAL:
        return None
    return Outcome(got[0], got[1], [])


def _advance_cursor(conn: Connection, spell: Spell, now: str) -> None:
    spells.advance_cursor(conn, spell.persona, spell.room_id, spell.last_line_id, now)


def _insert_row(conn: Connection, spell: Spell, c: Candidate, now: str) -> int:
    embedding = from_b64(c.embedding) if c.embedding else None
    return memories.insert_row(
        conn,
        persona=spell.persona,
        room_id=spell.room_id,
        witnessed=spell.witnessed,
        candidate=c,
        embedding=embedding,
        now=now,
    )
