"""The human's controls (seed §5): see it, undo it, write it, switch it off.

Every function here acts *as* one user and touches only what is about that user: rows whose
subject is them, or the persona's promises and loops whose counterpart is them. Undo and delete
are the only physical deletes in the system, and only the human's. Each mutating call runs in
one transaction; the page is plain dataclasses the app renders.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, delete, insert, or_, select, update

from memory_worker import store
from memory_worker import tables as t
from memory_worker.constants import BLOCK_CHARS_LIMIT, MEMORY_NOTE_MAX_CHARS, SUBJECT_SELF
from memory_worker.rows import Row, human_ref
from memory_worker.write.notify import concerns

pm = t.persona_memory.c  # the columns every query here names


class NotYours(PermissionError):
    """The user asked to touch a notice or row that is not about them."""


class NoteTooLong(ValueError):
    """The memory note is over the limit; the stored note is left as it was."""

    def __init__(self, length: int, limit: int = MEMORY_NOTE_MAX_CHARS):
        super().__init__(f"memory note is {length} chars; the limit is {limit}")
        self.length = length
        self.limit = limit


# --- undo and delete ------------------------------------------------------------------------


def undo_notice(user_id: int, notice_id: int) -> int:
    """The toast's undo: delete the rows it lists that concern the user. Returns how many.

    A second undo finds the notice already undone and does nothing, so a double tap is safe.
    """
    with store.transaction() as conn:
        n = t.notices.c
        found = conn.execute(
            select(n.user_id, n.row_ids, n.undone).where(n.id == notice_id)
        ).first()
        if found is None:
            raise LookupError(f"unknown notice {notice_id}")
        if found.user_id != user_id:
            raise NotYours(f"notice {notice_id} belongs to another user")
        if found.undone:
            return 0
        listed = [int(i) for i in json.loads(found.row_ids or "[]")]
        mine = [r.id for r in _load_rows(conn, pm.id.in_(listed)) if concerns_user(r, user_id)]
        _delete_rows(conn, user_id, mine)
        conn.execute(update(t.notices).where(n.id == notice_id).values(undone=1))
        return len(mine)


def delete_row(user_id: int, row_id: int) -> None:
    """Delete one row about the user; a row it had closed (an UPDATE) is reopened."""
    with store.transaction() as conn:
        rows = _load_rows(conn, pm.id == row_id)
        if not rows:
            raise LookupError(f"unknown memory row {row_id}")
        if not concerns_user(rows[0], user_id):
            raise NotYours(f"memory row {row_id} is not about user {user_id}")
        _delete_rows(conn, user_id, [row_id])


def clear_all(user_id: int, persona: str | None = None) -> int:
    """Delete every row about the user (only `persona`'s when given). Returns the count."""
    with store.transaction() as conn:
        where = _about(user_id) if persona is None else and_(_about(user_id), pm.persona == persona)
        ids = [r.id for r in _load_rows(conn, where) if concerns_user(r, user_id)]
        _delete_rows(conn, user_id, ids)
        return len(ids)


def _delete_rows(conn: Connection, user_id: int, ids: list[int]) -> None:
    """Delete `ids` and reopen what they closed: undoing an UPDATE restores what it replaced.

    Only rows that concern the same user are reopened; the router's neighbours share the
    subject, so in practice that is every row an UPDATE closed.
    """
    if not ids:
        return
    closed = _load_rows(conn, pm.closed_by.in_(ids))
    reopen = [r.id for r in closed if concerns_user(r, user_id) and r.id not in ids]
    if reopen:
        reopened = dict(valid_to=None, closed_by=None)
        conn.execute(update(t.persona_memory).where(pm.id.in_(reopen)).values(**reopened))
    conn.execute(delete(t.persona_memory).where(pm.id.in_(ids)))


# --- the note and the switches --------------------------------------------------------------


def clean_note(text: str | None) -> str | None:
    """Pure: the note as stored. Stripped; empty means no note; over the limit is refused."""
    note = (text or "").strip()
    if len(note) > MEMORY_NOTE_MAX_CHARS:
        raise NoteTooLong(len(note))
    return note or None


def set_note(user_id: int, text: str | None) -> None:
    """The field "what personas should remember about you", injected verbatim: kept short."""
    note = clean_note(text)
    with store.transaction() as conn:
        _require_user(conn, user_id)
        conn.execute(update(t.users).where(t.users.c.id == user_id).values(memory_note=note))


def set_memory_on(user_id: int, on: bool) -> None:
    """The account switch "Personas remember me"; off stops reads and writes about the user."""
    with store.transaction() as conn:
        _require_user(conn, user_id)
        conn.execute(update(t.users).where(t.users.c.id == user_id).values(memory_on=int(on)))


def mute(user_id: int, persona: str) -> None:
    """The switch "this persona forgets me": no reads or writes; existing rows stay."""
    with store.transaction() as conn:
        _require_user(conn, user_id)
        p = t.personas.c
        if conn.execute(select(p.slug).where(p.slug == persona)).first() is None:
            raise LookupError(f"unknown persona {persona!r}")
        if persona not in _muted(conn, user_id):
            conn.execute(insert(t.persona_memory_mute).values(user_id=user_id, persona=persona))


def unmute(user_id: int, persona: str) -> None:
    """Undo `mute`; unmuting what was never muted does nothing."""
    m = t.persona_memory_mute.c
    with store.transaction() as conn:
        conn.execute(
            delete(t.persona_memory_mute).where(m.user_id == user_id, m.persona == persona)
        )


# --- the page -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageLine:
    """One remembered line, with where it came from ("tap to jump") and its delete handle."""

    id: int
    text: str
    kind: str
    created: str  # YYYY-MM-DD
    valid_from: str | None
    valid_to: str | None
    closed: bool  # greyed on the page
    arc: str | None  # "2026-07 → 2026-11" for a closed row with both ends known
    room_id: str
    evidence: list[int]  # transcript line ids
    delete_id: int  # what `delete_row` takes


@dataclass(frozen=True)
class PersonaSection:
    persona: str
    name: str
    lines: list[PageLine]  # newest first, closed arcs included
    meter_chars: int  # chars of this persona's open lines about the user
    meter_limit: int = BLOCK_CHARS_LIMIT


@dataclass(frozen=True)
class ManagePage:
    user_id: int
    note: str | None
    memory_on: bool
    muted: list[str]
    personas: list[PersonaSection]


def manage_page(user_id: int) -> ManagePage:
    """Everything the human's page shows: only rows that concern this user."""
    with store.engine().connect() as conn:
        u = t.users.c
        user = conn.execute(select(u.memory_note, u.memory_on).where(u.id == user_id)).first()
        if user is None:
            raise LookupError(f"unknown user {user_id}")
        rows = _load_rows(conn, _about(user_id))
        names = {r.slug: r.name for r in conn.execute(select(t.personas))}
        muted = sorted(_muted(conn, user_id))
    sections = group_by_persona(rows, user_id, names)
    return ManagePage(user_id, user.memory_note, bool(user.memory_on), muted, sections)


def group_by_persona(
    rows: Iterable[Row], user_id: int, names: dict[str, str]
) -> list[PersonaSection]:
    """Pure: the user's rows as page sections, by persona slug; others' rows never pass."""
    by_persona: dict[str, list[Row]] = {}
    for r in rows:
        if concerns_user(r, user_id):
            by_persona.setdefault(r.persona, []).append(r)
    sections = []
    for slug in sorted(by_persona):
        mine = sorted(by_persona[slug], key=lambda r: r.id, reverse=True)
        meter = sum(len(r.text) for r in mine if r.valid_to is None)
        lines = [page_line(r) for r in mine]
        sections.append(PersonaSection(slug, names.get(slug, slug), lines, meter))
    return sections


def page_line(r: Row) -> PageLine:
    """Pure: a closed row stays on the page (greyed, with its arc): the arc is the history."""
    return PageLine(
        id=r.id,
        text=r.text,
        kind=r.kind,
        created=r.created[:10],
        valid_from=r.valid_from,
        valid_to=r.valid_to,
        closed=r.valid_to is not None,
        arc=arc(r.valid_from, r.valid_to),
        room_id=r.room_id,
        evidence=list(r.evidence),
        delete_id=r.id,
    )


def arc(valid_from: str | None, valid_to: str | None) -> str | None:
    """Pure: "2026-07 → 2026-11" (month precision) when both ends are known, else None."""
    if not valid_from or not valid_to:
        return None
    return f"{valid_from[:7]} → {valid_to[:7]}"


# --- who a row is about, and the loaders ----------------------------------------------------


def concerns_user(row: Row, user_id: int) -> bool:
    """Pure: the row's subject is the user, or it is a self item with them as counterpart."""
    return concerns({"subject": row.subject, "counterpart": row.counterpart}) == user_id


def _about(user_id: int) -> ColumnElement[bool]:
    """The SQL form of `concerns_user` (Python re-checks every row it returns)."""
    ref = human_ref(user_id)
    return or_(pm.subject == ref, and_(pm.subject == SUBJECT_SELF, pm.counterpart == ref))


def _load_rows(conn: Connection, where: ColumnElement[bool]) -> list[Row]:
    found = conn.execute(select(t.persona_memory).where(where)).mappings()
    return [Row.from_mapping(m) for m in found]


def _muted(conn: Connection, user_id: int) -> set[str]:
    m = t.persona_memory_mute.c
    return set(conn.execute(select(m.persona).where(m.user_id == user_id)).scalars())


def _require_user(conn: Connection, user_id: int) -> None:
    if conn.execute(select(t.users.c.id).where(t.users.c.id == user_id)).first() is None:
        raise LookupError(f"unknown user {user_id}")
