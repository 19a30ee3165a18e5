"""The commit (docs/design.md §2.4): one transaction per spell, idempotent, never deletes.

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

from memory_worker.core import provenance, toasts
from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.names import fold
from memory_worker.core.provenance import Audience
from memory_worker.core.rows import (
    Candidate,
    Decision,
    Line,
    Room,
    Spell,
    concerned,
    concerns,
    human_id,
)
from memory_worker.core.vectors import from_b64
from memory_worker.storage import embedder as store_embedder
from memory_worker.storage import memories, notices, rooms, spells, users
from memory_worker.write import extract, guards, route, window

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
    room = rooms.load_room(conn, spell.room_id)
    subjects = {c.subject for c in candidates}
    rows = memories.open_rows(conn, window.spell_scope(spell, room), subjects)
    if spell.candidates and route.fingerprint(rows) != spell.seen_open_rows:
        return Outcome("stale", [], [])

    # Who the new rows may reach: the spell's humans who still let the persona remember them
    # (a switch may have flipped since the spell began). Their audience is decided here, from
    # the store's facts alone: who said each cited line, and who witnessed it.
    allowing = set(users.eligible_humans(conn, spell.persona, spell.present))
    open_texts = {(r.subject, r.text.strip().lower()): r.id for r in rows}
    shown = {r.id: r for r in rows}  # only rows the audience allows can be closed
    already = extract.rows_today(conn, spell.persona, today, spell.present)
    writing = [d for d in decisions if d.event in ("ADD", "UPDATE")]
    allowed, _ = extract.cap([candidates[d.candidate] for d in writing], already)
    allowed_ids = {id(c) for c in allowed}
    cited = rooms.lines_by_id(conn, {i for c in candidates for i in c.evidence})
    lines = {i: line for i, line in cited.items() if line.room_id == spell.room_id}
    named = _named(conn, spell, [candidates[d.candidate] for d in writing])
    joins = _confirmations(conn, spell, candidates, allowing, lines)

    row_ids: list[int] = []
    closed: list[int] = []
    for d in decisions:
        c = candidates[d.candidate]
        label = _label(c, allowing, lines)
        if label == ():
            continue  # nobody left who lets the persona remember it
        old = d.old_row_id
        if d.event in ("ADD", "UPDATE"):
            if id(c) not in allowed_ids or (c.subject, c.text.lower()) in open_texts:
                continue  # over today's cap, or the very same sentence is already open
            if joins.covers(c):
                continue  # a row the speaker just joined already says it
            replaces = d.event == "UPDATE" and old is not None and _may_change(shown, old, c, label)
            new_id = _insert_row(conn, spell, c, now, named[id(c)], label)
            row_ids.append(new_id)
            open_texts[(c.subject, c.text.lower())] = new_id
            if replaces and old is not None:
                memories.close(conn, old, c.valid_from or today, new_id)
                shown.pop(old)
                closed.append(old)
        elif d.event == "CLOSE" and old is not None and _may_change(shown, old, c, label):
            memories.close(conn, old, c.valid_from or today, None)
            shown.pop(old)
            closed.append(old)
    _advance_cursor(conn, spell, now)
    spells.record(conn, spell, "committed", None, row_ids, now)
    _post_toasts(conn, spell, room, row_ids, joins.by_user, now)
    return Outcome("committed", row_ids, closed)


def _label(c: Candidate, allowing: set[int], lines: dict[int, Line]) -> Audience | tuple[()]:
    """Who a candidate's row may reach: for a world row its audience (`provenance.world_label`:
    public only when the dispatches it cites say it all, else the spell's humans who witnessed
    its lines and let the persona remember them); for a row about a human or a promise to
    one, that human while they still allow it. `()`: nobody, so it is not written."""
    if c.subject == SUBJECT_WORLD:
        cited = [(lines[i].speaker, lines[i].text) for i in c.evidence if i in lines]
        return provenance.world_label(cited, c.text, allowing)
    return None if concerns(c.subject, c.counterpart) in allowing else ()


@dataclass
class Joins:
    """The world rows a human joined in this spell by stating them in their own line."""

    by_user: dict[int, list[int]]  # human → the row ids they joined
    texts: set[str]  # the joined rows' folded texts: a candidate saying the same is not added

    def covers(self, c: Candidate) -> bool:
        return c.subject == SUBJECT_WORLD and fold(c.text) in self.texts


def _confirmations(
    conn: Connection,
    spell: Spell,
    candidates: list[Candidate],
    allowing: set[int],
    lines: dict[int, Line],
) -> Joins:
    """A world fact's audience grows only when a human outside it states it in their own line
    (docs/design.md §12): for each world candidate, each cited line of a human the spell may
    write for is compared — by code, on the line's own words, never on the model's — with the
    persona's nearest open world rows held by others; a row whose every distinctive word the
    line states gains that human (with the line as more evidence). The router's word confirms
    nothing, and repetition never makes a row public."""
    joins = Joins({}, set())
    world = [c for c in candidates if c.subject == SUBJECT_WORLD and c.embedding]
    speaker_of = {i: line.speaker for i, line in lines.items()}
    said = {  # (human, line): a cited line of a human this spell may write for
        (uid, i)
        for c in world
        for i in c.evidence
        if (uid := human_id(speaker_of.get(i, ""))) is not None and uid in allowing
    }
    if not said:
        return joins
    floor = route.neighbour_floor(_writer(conn))
    for uid in sorted({u for u, _ in said}):
        outside = memories.world_rows_outside(conn, spell.persona, uid)
        for c in world:
            theirs = [i for i in c.evidence if (uid, i) in said]
            if not theirs or not outside:
                continue
            for row_id in route.neighbours([c], outside, floor)[0]:
                row = next(r for r in outside if r.id == row_id)
                line = next(
                    (
                        i
                        for i in theirs
                        if provenance.may_join(
                            uid, row.private_to, allowing=allowing, speakers=speaker_of, line_id=i
                        )
                        and provenance.confirms(lines[i].text, row.text)
                    ),
                    None,
                )
                if line is None or row_id in joins.by_user.get(uid, []):
                    continue
                audience = set(row.private_to or ())
                memories.set_audience(conn, row_id, audience | {uid}, was=audience)
                memories.add_evidence(conn, row_id, [line])
                joins.by_user.setdefault(uid, []).append(row_id)
                joins.texts.add(fold(row.text))
    return joins


def _writer(conn: Connection) -> str | None:
    """The name of the embedder that made the store's vectors (whose neighbour floor holds)."""
    have = store_embedder.identity(conn)
    return have.writer[0] if have else None


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
    joined: dict[int, list[int]],
    now: str,
) -> None:
    """The outbox: one toast per human the new rows concern (and the rows they joined), in
    the commit's transaction, so rows are never written without their toast; `notify_toast`
    delivers them after."""
    if not row_ids and not joined:
        return
    by_id = memories.rows_by_id(conn, sorted({*row_ids, *(i for v in joined.values() for i in v)}))
    rows = [by_id[i] for i in row_ids if i in by_id]
    also = {u: [by_id[i] for i in ids if i in by_id] for u, ids in joined.items()}
    humans = {u for r in rows for u in concerned(r.subject, r.counterpart, r.private_to)}
    names = users.user_names(conn, sorted(humans | set(also)))
    persona_name = users.persona_name(conn, spell.persona)
    in_group = None
    if not room.is_private_chat():  # the toast says whether it may follow them into groups
        private = users.stays_private(conn, sorted(names), [spell.persona])
        follow = settings_mod.current().memory_scope == "follow"
        in_group = {u: follow and (u, spell.persona) not in private for u in names}
    for toast in toasts.toasts(persona_name, rows, names, also=also, in_group=in_group):
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
    shown: dict[int, memories.OpenRow], row_id: int, c: Candidate, label: Audience | tuple[()]
) -> bool:
    """The router may UPDATE or CLOSE only an open row it was shown, about what `c` is about,
    and a world row only when its audience is the new row's (`provenance.may_change`)."""
    row = shown.get(row_id)
    if row is None or not route.same_concern(row, c):
        return False
    return row.subject != SUBJECT_WORLD or provenance.may_change(row.private_to, label or None)


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


def _insert_row(
    conn: Connection,
    spell: Spell,
    c: Candidate,
    now: str,
    named: list[int],
    label: Audience | tuple[()],
) -> int:
    embedding = from_b64(c.embedding) if c.embedding else None
    private_to = label if c.subject == SUBJECT_WORLD else None
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
    if private_to is not None:
        memories.set_audience(conn, new_id, private_to)
    return new_id
