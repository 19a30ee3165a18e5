"""The human's controls (seed §5): see it, undo it, write it, switch it off.

Every function here acts *as* one user and touches only what is about that user: rows whose
subject is them, the persona's promises and loops whose counterpart is them, and world rows that
cite their lines (they came from their words). Undo and delete are the only physical deletes in
the system, and only the human's; a delete reaches every copy — the toasts that quoted a deleted
row are reworded without it. Each mutating call runs in one transaction; the page is plain
dataclasses the app renders.

Inputs are checked before anything is read: a wrong type is a `TypeError` that names the
argument. "No such row" and "not yours" are one error, `NotFound`, with one wording, so a
caller cannot probe which ids exist.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection

from memory_worker.core import toasts
from memory_worker.core.block import span
from memory_worker.core.constants import BLOCK_CHARS_LIMIT, MEMORY_NOTE_MAX_CHARS, SUBJECT_WORLD
from memory_worker.core.errors import MemoryWorkerError
from memory_worker.core.rows import Row, concerned, human_id, human_ref
from memory_worker.storage import memories, notices, rooms, store, users

ID_MAX = 2**63 - 1  # the largest id a database integer holds


class NotFound(MemoryWorkerError, LookupError):
    """No such notice or row *for this user*: missing and not theirs answer the same."""

    def __init__(self, what: str, item_id: object, user_id: int):
        super().__init__(f"no {what} {item_id} for user {user_id}")


NotYours = NotFound  # the old name: "not yours" is no longer told apart from "missing"


class NoteTooLong(MemoryWorkerError, ValueError):
    """The memory note is over the limit; the stored note is left as it was."""

    def __init__(self, length: int, limit: int = MEMORY_NOTE_MAX_CHARS):
        super().__init__(f"memory note is {length} chars; the limit is {limit}")
        self.length = length
        self.limit = limit


# --- undo and delete ------------------------------------------------------------------------


def check_id(value: object, name: str) -> int:
    """An id argument as an int; TypeError (naming the argument) for anything else.

    bool is refused although it is an int: `True` is not an id.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def _in_range(value: int) -> bool:
    """An id a database could hold: out of range answers "not found", never an overflow."""
    return 1 <= value <= ID_MAX


def undo_notice(user_id: int, notice_id: int) -> int:
    """The toast's undo: delete the rows it lists that concern the user. Returns how many.

    A second undo finds the notice already undone and does nothing, so a double tap is safe.
    """
    check_id(user_id, "user_id")
    check_id(notice_id, "notice_id")
    if not (_in_range(user_id) and _in_range(notice_id)):
        raise NotFound("notice", notice_id, user_id)
    with store.transaction() as conn:
        found = notices.get(conn, notice_id)
        if found is None or found.user_id != user_id:
            raise NotFound("notice", notice_id, user_id)
        if found.undone:
            return 0
        listed = memories.rows_by_id(conn, found.row_ids).values()
        mine = [r.id for r in listed if concerns_user(r, user_id)]
        _delete_rows(conn, user_id, mine)
        notices.mark_undone(conn, notice_id)
        return len(mine)


def delete_row(user_id: int, row_id: int) -> None:
    """Delete one row that concerns the user; a row it had closed (an UPDATE) is reopened."""
    check_id(user_id, "user_id")
    check_id(row_id, "row_id")
    if not (_in_range(user_id) and _in_range(row_id)):
        raise NotFound("memory row", row_id, user_id)
    with store.transaction() as conn:
        rows = list(memories.rows_by_id(conn, [row_id]).values())
        if not rows or not concerns_user(rows[0], user_id):
            raise NotFound("memory row", row_id, user_id)
        _delete_rows(conn, user_id, [row_id])


def clear_all(user_id: int, persona: str | None = None) -> int:
    """Delete every row that concerns the user (only `persona`'s when given). Returns the count."""
    check_id(user_id, "user_id")
    if persona is not None and not isinstance(persona, str):
        raise TypeError(f"persona must be a str or None, not {type(persona).__name__}")
    if not _in_range(user_id):
        return 0
    with store.transaction() as conn:
        rows = memories.rows_about(conn, user_id, persona)
        ids = [r.id for r in rows if concerns_user(r, user_id)]
        _delete_rows(conn, user_id, ids)
        return len(ids)


def _delete_rows(conn: Connection, user_id: int, ids: list[int]) -> None:
    """Delete `ids`, reopen what they closed, and reword the toasts that quoted them.

    Undoing an UPDATE restores what it replaced. Only rows that concern the same user are
    reopened; the router's neighbours share the subject, so in practice that is every row an
    UPDATE closed.
    """
    if not ids:
        return
    closed = memories.rows_closed_by(conn, ids)
    memories.reopen(conn, [r.id for r in closed if concerns_user(r, user_id) and r.id not in ids])
    places = {(r.persona, r.room_id) for r in memories.rows_by_id(conn, ids).values()}
    memories.delete_rows(conn, ids)
    _redact_toasts(conn, places, set(ids))


def _redact_toasts(conn: Connection, places: set[tuple[str, str]], gone: set[int]) -> None:
    """Every toast that quoted a deleted row, reworded without it (a delete reaches every copy).

    A toast covers the rows of one spell, so it carries their persona and room: only those
    notices are read.
    """
    for persona, room_id in sorted(places):
        persona_name = users.persona_name(conn, persona)
        for notice in notices.of_place(conn, persona, room_id):
            removed = [i for i in notice.row_ids if i in gone]
            if not removed:
                continue
            left = [i for i in notice.row_ids if i not in gone]
            kept = memories.rows_by_id(conn, left)
            texts = [kept[i].text for i in left if i in kept]
            names = users.user_names(conn, sorted(toasts.mentioned(texts)))
            text = toasts.redacted(
                persona_name, [toasts.named(x, names) for x in texts], len(removed)
            )
            notices.reword(conn, notice.id, text, left)


# --- the note and the switches --------------------------------------------------------------


def clean_note(text: str | None) -> str | None:
    """Pure: the note as stored. Stripped; empty means no note; over the limit is refused.

    Only a str (or None, to clear it) is a note: `0`, bytes or a list is a TypeError, never
    stored as "b'...'" nor silently taken as "no note".
    """
    if text is not None and not isinstance(text, str):
        raise TypeError(f"the memory note must be a str or None, not {type(text).__name__}")
    note = (text or "").strip()
    if len(note) > MEMORY_NOTE_MAX_CHARS:
        raise NoteTooLong(len(note))
    return note or None


def set_note(user_id: int, text: str | None) -> None:
    """The field "what personas should remember about you", injected verbatim: kept short."""
    check_id(user_id, "user_id")
    note = clean_note(text)
    with store.transaction() as conn:
        _require_user(conn, user_id)
        users.set_note(conn, user_id, note)


def set_memory_on(user_id: int, on: bool) -> None:
    """The account switch "Personas remember me"; off stops reads and writes about the user."""
    check_id(user_id, "user_id")
    if not isinstance(on, bool):
        raise TypeError(f"on must be a bool, not {type(on).__name__}")
    with store.transaction() as conn:
        _require_user(conn, user_id)
        users.set_memory_on(conn, user_id, on)


def mute(user_id: int, persona: str) -> None:
    """The switch "this persona forgets me": no reads or writes; existing rows stay."""
    _check_user_and_persona(user_id, persona)
    with store.transaction() as conn:
        _require_user(conn, user_id)
        if not users.persona_exists(conn, persona):
            raise LookupError(f"unknown persona {persona!r}")
        if persona not in users.muted_by(conn, user_id):
            users.add_mute(conn, user_id, persona)


def unmute(user_id: int, persona: str) -> None:
    """Undo `mute`; unmuting what was never muted does nothing."""
    _check_user_and_persona(user_id, persona)
    if not _in_range(user_id):
        return
    with store.transaction() as conn:
        users.remove_mute(conn, user_id, persona)


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
    arc: str | None  # a closed row's "2026-07 → 2026-11-02" (`block.span`); None while open
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
    check_id(user_id, "user_id")
    with store.engine().connect() as conn:
        _require_user(conn, user_id)
        note, memory_on = users.switches(conn, user_id)
        rows = memories.rows_about(conn, user_id)
        names = users.all_persona_names(conn)
        muted = sorted(users.muted_by(conn, user_id))
    sections = group_by_persona(rows, user_id, names)
    return ManagePage(user_id, note, memory_on, muted, sections)


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
        meter = sum(len(r.text) for r in mine if r.valid_to is None and r.subject != SUBJECT_WORLD)
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
        arc=span(r.valid_from, r.valid_to) if r.valid_to is not None else None,
        room_id=r.room_id,
        evidence=list(r.evidence),
        delete_id=r.id,
    )


# --- who a row is about ----------------------------------------------------------------------


def concerns_user(row: Row, user_id: int) -> bool:
    """Pure: the row is about the user, is the persona's promise or loop with them, or is a
    world row that cites their lines (`rows.concerned`)."""
    return user_id in concerned(row.subject, row.counterpart, row.sources)


def _check_user_and_persona(user_id: object, persona: object) -> None:
    check_id(user_id, "user_id")
    if not isinstance(persona, str):
        raise TypeError(f"persona must be a str, not {type(persona).__name__}")


def _require_user(conn: Connection, user_id: int) -> None:
    """LookupError for an unknown user — and for an id no database could hold."""
    if not _in_range(user_id):
        raise LookupError(f"unknown user {user_id}")
    users.require_user(conn, user_id)


# --- the rail, the evidence, the rooms (what `memory-worker serve` shows besides the page) --


@dataclass(frozen=True)
class RailNotice:
    """A toast on the user's rail, with its undo handle (`undo_notice` takes `id`)."""

    id: int
    persona: str
    room_id: str
    text: str
    created: str
    undone: bool


def rail(user_id: int, after_id: int = 0, limit: int = 20) -> list[RailNotice]:
    """The user's newest toasts (only those after `after_id` when given), newest first."""
    check_id(user_id, "user_id")
    check_id(after_id, "after_id")
    check_id(limit, "limit")
    if not _in_range(user_id) or not 0 <= after_id <= ID_MAX:
        return []
    with store.engine().connect() as conn:
        found = notices.of_user(conn, user_id, after_id, limit)
    return [RailNotice(n.id, n.persona, n.room_id, n.text, n.created, n.undone) for n in found]


@dataclass(frozen=True)
class EvidenceLine:
    """A transcript line a row cites. Another human's words are withheld (`text` is None)."""

    id: int
    speaker: str  # 'u:42' or a persona slug
    text: str | None
    created: str


def evidence(user_id: int, page: ManagePage) -> dict[int, list[EvidenceLine]]:
    """The lines each row on the user's page cites ("tap to jump"), by row id.

    Only rows the page already shows are looked up, so this answers exactly what the page may
    show; a line another human spoke is listed without its text.
    """
    cited = {line.id: (line.room_id, line.evidence) for s in page.personas for line in s.lines}
    with store.engine().connect() as conn:
        found = rooms.lines_by_id(conn, (i for _, ids in cited.values() for i in ids))
    me = human_ref(user_id)
    out: dict[int, list[EvidenceLine]] = {}
    for row_id, (room_id, ids) in cited.items():
        lines = [found[i] for i in ids if i in found and found[i].room_id == room_id]
        out[row_id] = [
            EvidenceLine(x.id, x.speaker, x.text if _may_quote(x.speaker, me) else None, x.created)
            for x in lines
        ]
    return out


def _may_quote(speaker: str, me: str) -> bool:
    """The user's own words and a persona's; never another human's."""
    return speaker == me or human_id(speaker) is None


@dataclass(frozen=True)
class RoomInfo:
    """A room the user is in; incognito rooms neither write memories nor load them."""

    id: str
    kind: str
    incognito: bool
    personas: list[str]


def rooms_of(user_id: int) -> list[RoomInfo]:
    """The rooms the user is a member of, newest first, with the personas in each."""
    check_id(user_id, "user_id")
    with store.engine().connect() as conn:
        found = rooms.rooms_of(conn, human_ref(user_id))
        return [RoomInfo(r.id, r.kind, r.incognito, rooms.members(conn, r.id)[0]) for r in found]


def persona_names() -> dict[str, str]:
    """Every persona's display name by slug (the page's "start a chat with" list)."""
    with store.engine().connect() as conn:
        return users.all_persona_names(conn)


def start_room(user_id: int, persona: str, *, incognito: bool) -> str:
    """A private room between the user and a persona. Incognito is chosen here, at creation,
    and never flipped later: a switch cannot make a room's past remembered or forgotten."""
    _check_user_and_persona(user_id, persona)
    if not isinstance(incognito, bool):
        raise TypeError(f"incognito must be a bool, not {type(incognito).__name__}")
    with store.transaction() as conn:
        _require_user(conn, user_id)
        if not users.persona_exists(conn, persona):
            raise LookupError(f"unknown persona {persona!r}")
        room_id = f"room-{secrets.token_hex(6)}"
        members = [human_ref(user_id), persona]
        rooms.add_room(conn, room_id, "private", members, incognito=incognito)
        return room_id
