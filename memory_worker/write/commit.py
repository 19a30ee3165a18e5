"""The commit (DESIGN.md "commit"): one transaction per spell, idempotent, never deletes.

ADD inserts; UPDATE inserts the new row and closes the neighbour (`valid_to`, `closed_by`);
CLOSE sets `valid_to`; NONE writes nothing. The persona's cursor advances in the same
transaction, and the outcome is recorded in `spells` keyed by (persona, room, last line): a
second run finds it and returns the same row ids. Run it inside `store.writer(persona)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection, insert, select, update

from memory_worker import tables as t
from memory_worker.rows import Candidate, Decision, Spell
from memory_worker.vectors import from_b64
from memory_worker.write import extract, route

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
        _record(conn, spell, "parked", spell.parked, [], now)
        return Outcome("parked", [], [])
    if spell.skipped:
        _advance_cursor(conn, spell, now)
        _record(conn, spell, "skipped", spell.skipped, [], now)
        return Outcome("skipped", [], [])

    candidates = [Candidate.from_json(c) for c in spell.candidates]
    decisions = [Decision.from_json(d) for d in spell.decisions]
    rows = route.open_rows(conn, spell.persona, {c.subject for c in candidates})
    if spell.candidates and route.fingerprint(rows) != spell.seen_open_rows:
        return Outcome("stale", [], [])

    open_texts = {(r.subject, r.text.strip().lower()): r.id for r in rows}
    open_ids = {r.id for r in rows}
    already = extract.rows_today(conn, spell.persona, spell.present, today)
    writing = [d for d in decisions if d.event in ("ADD", "UPDATE")]
    allowed, _ = extract.cap_per_human([candidates[d.candidate] for d in writing], already)
    allowed_ids = {id(c) for c in allowed}

    row_ids: list[int] = []
    closed: list[int] = []
    for d in decisions:
        c = candidates[d.candidate]
        if d.event in ("ADD", "UPDATE"):
            if id(c) not in allowed_ids or (c.subject, c.text.lower()) in open_texts:
                continue  # over today's cap, or the very same sentence is already open
            new_id = _insert_row(conn, spell, c, now)
            row_ids.append(new_id)
            open_texts[(c.subject, c.text.lower())] = new_id
            if d.event == "UPDATE" and d.old_row_id in open_ids:
                _close(conn, d.old_row_id, c.valid_from or today, new_id)
                open_ids.discard(d.old_row_id)
                closed.append(d.old_row_id)
        elif d.event == "CLOSE" and d.old_row_id in open_ids:
            _close(conn, d.old_row_id, c.valid_from or today, None)
            open_ids.discard(d.old_row_id)
            closed.append(d.old_row_id)
    _advance_cursor(conn, spell, now)
    _record(conn, spell, "committed", None, row_ids, now)
    return Outcome("committed", row_ids, closed)


def _recorded(conn: Connection, spell: Spell) -> Outcome | None:
    s = t.spells.c
    got = conn.execute(
        select(s.status, s.row_ids).where(
            s.persona == spell.persona,
            s.room_id == spell.room_id,
            s.last_line_id == spell.last_line_id,
        )
    ).first()
    if got is None or got.status not in FINAL:
        return None
    return Outcome(got.status, json.loads(got.row_ids), [])


def _record(
    conn: Connection, spell: Spell, status: str, reason: str | None, row_ids: list[int], now: str
) -> None:
    s = t.spells.c
    key = (
        s.persona == spell.persona,
        s.room_id == spell.room_id,
        s.last_line_id == spell.last_line_id,
    )
    values = dict(
        status=status,
        reason=reason,
        row_ids=json.dumps(row_ids),
        tokens_in=spell.tokens_in,
        tokens_out=spell.tokens_out,
        created=now,
    )
    if conn.execute(update(t.spells).where(*key).values(**values)).rowcount == 0:
        conn.execute(
            insert(t.spells).values(
                persona=spell.persona,
                room_id=spell.room_id,
                last_line_id=spell.last_line_id,
                **values,
            )
        )


def _advance_cursor(conn: Connection, spell: Spell, now: str) -> None:
    """cursor = max(cursor, last line): an older spell finishing late never moves it back."""
    c = t.cursors.c
    where = (c.persona == spell.persona, c.room_id == spell.room_id)
    current = conn.execute(select(c.last_line_id).where(*where)).scalar()
    if current is None:
        conn.execute(
            insert(t.cursors).values(
                persona=spell.persona,
                room_id=spell.room_id,
                last_line_id=spell.last_line_id,
                updated=now,
            )
        )
    elif current < spell.last_line_id:
        conn.execute(
            update(t.cursors).where(*where).values(last_line_id=spell.last_line_id, updated=now)
        )


def _insert_row(conn: Connection, spell: Spell, c: Candidate, now: str) -> int:
    res = conn.execute(
        insert(t.persona_memory).values(
            persona=spell.persona,
            subject=c.subject,
            counterpart=c.counterpart,
            witnessed=json.dumps(sorted(spell.witnessed)),
            room_id=spell.room_id,
            kind=c.kind,
            text=c.text,
            importance=c.importance,
            valid_from=c.valid_from,
            valid_to=None,
            closed_by=None,
            evidence=json.dumps(list(c.evidence)),
            created=now,
            last_recalled=None,
            recall_count=0,
            embedding=from_b64(c.embedding) if c.embedding else None,
        )
    )
    return int(res.inserted_primary_key[0])


def _close(conn: Connection, row_id: int, valid_to: str, closed_by: int | None) -> None:
    conn.execute(
        update(t.persona_memory)
        .where(t.persona_memory.c.id == row_id, t.persona_memory.c.valid_to.is_(None))
        .values(valid_to=valid_to, closed_by=closed_by)
    )
