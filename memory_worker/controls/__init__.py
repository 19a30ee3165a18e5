"""The human's controls (docs/design.md §5): see it, undo it, write it, switch it off.

Every function here acts *as* one user and touches only what is about that user: rows whose
subject is them, the persona's promises and loops whose counterpart is them, and world rows
whose audience holds them (they witnessed the lines it cites). Undo and delete are the only
physical deletes in the system, and only the human's; a delete reaches every copy — the toasts
that quoted a deleted row are reworded without it. A world row others hold too is theirs as
well: deleting it takes the user out of its audience, and it goes when nobody is left. The page
shows a user only what they witnessed: evidence lines said while they were in the room, and
the rooms they are a member of. Each mutating call runs in one transaction; the page is plain
dataclasses the app renders.

Inputs are checked before anything is read: a wrong type is a `TypeError` that names the
argument. "No such row" and "not yours" are one error, `NotFound`, with one wording, so a
caller cannot probe which ids exist.
"""

from __future__ import annotations

import secrets
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection

from memory_worker.core import block, names, toasts
from memory_worker.core import settings as settings_mod
from memory_worker.core.block import span
from memory_worker.core.constants import BLOCK_CHARS_LIMIT, MEMORY_NOTE_MAX_CHARS, SUBJECT_WORLD
from memory_worker.core.errors import (
    BadCursor,
    BadRequest,
    BadSearch,
    ListChanged,
    NoteTooLong,
    NotFound,
    UnknownUser,
)
from memory_worker.core.numbers import whole_number
from memory_worker.core.provenance import witnesses
from memory_worker.core.rows import Line, Row, concerned, human_id, human_ref
from memory_worker.storage import memories, notices, rooms, store, users

ID_MAX = 2**63 - 1  # the largest id a database integer holds


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
    """Delete `ids` for the user: a world row others hold too loses the user from its
    audience (it is theirs as well); every other row is deleted, what it closed is reopened,
    and the toasts that quoted it are reworded without it.

    Undoing an UPDATE restores what it replaced. Only rows that concern the same user are
    reopened; the router's neighbours share the subject, so in practice that is every row an
    UPDATE closed.
    """
    if not ids:
        return
    found = memories.rows_by_id(conn, ids)
    shared = [r for r in found.values() if _others_hold(r, user_id)]
    for r in shared:
        held = set(r.private_to or ())
        memories.set_audience(conn, r.id, held - {user_id}, was=held)
    _redact_toasts(conn, _places(conn, shared), {r.id for r in shared}, user_id)
    gone = [i for i in ids if i in found and found[i] not in shared]
    if not gone:
        return
    closed = [
        r
        for r in memories.rows_closed_by(conn, gone)
        if concerns_user(r, user_id) and r.id not in gone
    ]
    # A copy of the same sentence that a wider row closed (the commit's exactly-once across
    # audiences) is the same memory: it goes too, never comes back.
    copies = [r for r in closed if _same_sentence(r, found.get(r.closed_by or 0))]
    memories.reopen(conn, [r.id for r in closed if r not in copies])
    places = _places(conn, [found[i] for i in gone])
    memories.delete_rows(conn, gone)
    _redact_toasts(conn, places, set(gone))
    _delete_rows(conn, user_id, [r.id for r in copies])


def _same_sentence(row: Row, closer: Row | None) -> bool:
    return closer is not None and names.sentence_key(row.text) == names.sentence_key(closer.text)


def _places(conn: Connection, rows: list[Row]) -> set[tuple[str, str]]:
    """Where toasts may quote these rows: (persona, room) of the spells that wrote them or
    that a human joined them in — the rooms of their evidence lines."""
    lines = rooms.lines_by_id(conn, {i for r in rows for i in r.evidence})
    places = {(r.persona, r.room_id) for r in rows}
    places |= {(r.persona, lines[i].room_id) for r in rows for i in r.evidence if i in lines}
    return places


def _others_hold(row: Row, user_id: int) -> bool:
    """A world row whose audience holds someone besides the user."""
    return row.subject == SUBJECT_WORLD and bool(set(row.private_to or ()) - {user_id})


def _redact_toasts(
    conn: Connection, places: set[tuple[str, str]], gone: set[int], user_id: int | None = None
) -> None:
    """Every toast that quoted a deleted row (only `user_id`'s, for a row they left), reworded
    without it (a delete reaches every copy).

    A toast covers the rows of one spell, so it carries their persona and room: only those
    notices are read.
    """
    for persona, room_id in sorted(places):
        persona_name = users.persona_name(conn, persona)
        for notice in notices.of_place(conn, persona, room_id):
            removed = [i for i in notice.row_ids if i in gone]
            if not removed or (user_id is not None and notice.user_id != user_id):
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
            raise NotFound("persona", repr(persona), user_id)
        if persona not in users.muted_by(conn, user_id):
            users.add_mute(conn, user_id, persona)


def unmute(user_id: int, persona: str) -> None:
    """Undo `mute`; unmuting what was never muted does nothing."""
    _check_user_and_persona(user_id, persona)
    if not _in_range(user_id):
        return
    with store.transaction() as conn:
        users.remove_mute(conn, user_id, persona)


def set_follows(user_id: int, persona: str, on: bool) -> None:
    """The switch "bring up what I told you privately when I'm in a group", per persona. On
    (the default) follows the deployment's scope; off keeps the user's one-to-one rows with
    this persona in their private chats, while the rest of the group scope applies."""
    _check_user_and_persona(user_id, persona)
    if not isinstance(on, bool):
        raise TypeError(f"on must be a bool, not {type(on).__name__}")
    with store.transaction() as conn:
        _require_user(conn, user_id)
        if not users.persona_exists(conn, persona):
            raise NotFound("persona", repr(persona), user_id)
        users.set_follows(conn, user_id, persona, on)


def group_scope() -> bool:
    """Whether this deployment lets memories follow people into groups (MW_MEMORY_SCOPE)."""
    return settings_mod.current().memory_scope == "follow"


def may_follow(group_scope: bool, memory_on: bool, forget_me: bool, switch_on: bool) -> bool:
    """Pure: whether what a user told a persona one-to-one may come up in groups they are in —
    what the reader would load (docs/design.md §4): only under the group scope, with their
    memory on, without "forget me" for that persona, and with their switch on."""
    return group_scope and memory_on and not forget_me and switch_on


def follows_into_groups(user_id: int, persona: str) -> bool:
    """`may_follow` for this user and persona, as the store and the deployment say now."""
    with store.engine().connect() as conn:
        _, memory_on = users.switches(conn, user_id)
        muted = users.muted_by(conn, user_id)
        private = users.private_with(conn, user_id)
    return may_follow(group_scope(), memory_on, persona in muted, persona not in private)


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
    room_id: str | None  # where it formed; None: a room the user is not a member of
    evidence: list[int]  # the transcript lines it cites that the user witnessed
    delete_id: int  # what `delete_row` takes (a shared world row: the user leaves it)


@dataclass(frozen=True)
class PersonaSection:
    persona: str
    name: str
    lines: list[PageLine]  # open ones newest first, then closed ones (their arcs) newest first
    meter_chars: int  # chars of this persona's open lines about the user
    meter_limit: int = BLOCK_CHARS_LIMIT
    # Whether what the user told this persona one-to-one may come up in groups they are in
    # (`may_follow`: the group scope, memory on, no "forget me", the switch on).
    follows_into_groups: bool = False
    open_count: int = 0  # every open line of this persona about the user, not this page's
    closed_count: int = 0


@dataclass(frozen=True)
class ManagePage:
    user_id: int
    note: str | None
    memory_on: bool
    muted: list[str]
    personas: list[PersonaSection]
    group_scope: bool = False  # the deployment lets memories follow people into groups
    private_with: list[str] = field(default_factory=list)  # personas the user's switch is off for
    next_cursor: str | None = None  # the next page's `cursor` (None: this was the last)

    def follows_into_groups(self, persona: str) -> bool:
        """`may_follow` for one persona of this page."""
        return may_follow(
            self.group_scope,
            self.memory_on,
            persona in self.muted,
            persona not in self.private_with,
        )


def manage_page(
    user_id: int, *, cursor: str | None = None, query: str | None = None, limit: int | None = None
) -> ManagePage:
    """Everything the human's page shows: only rows that concern this user. With `limit`,
    one page of their lines (`page_lines`) and every persona's counts; without, every line."""
    check_id(user_id, "user_id")
    with store.engine().connect() as conn:
        _require_user(conn, user_id)
        note, memory_on = users.switches(conn, user_id)
        counts = None
        if limit is None:
            rows, after = memories.rows_about(conn, user_id), None
        else:
            rows, after = page_lines(conn, user_id, cursor, query, limit)
            counts = memories.page_counts(conn, user_id)
        names = users.all_persona_names(conn)
        muted = sorted(users.muted_by(conn, user_id))
        private = sorted(users.private_with(conn, user_id))
        _, seen, joined = _witnessed(conn, user_id, rows)
    page = ManagePage(user_id, note, memory_on, muted, [], group_scope(), private, after)
    sections = group_by_persona(rows, user_id, names, seen, set(joined))
    if counts is not None:
        sections = _counted(sections, counts, names)
    sections = [
        replace(s, follows_into_groups=page.follows_into_groups(s.persona)) for s in sections
    ]
    return replace(page, personas=sections)


PAGE_QUERY_MAX_CHARS = 200  # ours: a search longer than any remembered line is a mistake
PAGE_LINES_MAX = 200  # ours: a page's lines at most, whatever a client asks
STAMP_MAX = 2**63 - 1  # a walk's start (`memories.toggle_stamp`) fits a database integer


def check_query(query: str | None) -> None:
    """BadSearch for a search the page will not run: longer than PAGE_QUERY_MAX_CHARS, or
    holding a control character (a NUL matched every line)."""
    if query is None:
        return
    if len(query) > PAGE_QUERY_MAX_CHARS:
        raise BadSearch(
            f"a search is at most {PAGE_QUERY_MAX_CHARS} characters; this one has {len(query)}"
        )
    if any(unicodedata.category(c) == "Cc" for c in query):
        raise BadSearch("a search cannot hold control characters")


@dataclass(frozen=True)
class PageCursor:
    """Where a page walk is: in the closed half or not, below which id (None: from the top of
    the half), and when the walk began (`memories.toggle_stamp`)."""

    closed: bool
    before: int | None
    since: int

    def __str__(self) -> str:
        return f"{'c' if self.closed else 'o'}.{self.before or 0}.{self.since}"


def page_lines(
    conn: Connection, user_id: int, cursor: str | None, query: str | None, limit: int
) -> tuple[list[Row], str | None]:
    """One page of the user's lines: open ones newest first, then closed ones newest first,
    from `cursor` (None: the top) and holding `query`; and the next page's cursor (None: no
    more). A cursor is `PageCursor` as text; anything else is a BadCursor.

    A row about the user closed or reopened after the walk began would move from one half to
    the other — shown twice, or never — so the next page is then `ListChanged` instead."""
    check_id(limit, "limit")
    if not 1 <= limit <= PAGE_LINES_MAX:
        raise BadRequest(f"limit must be 1..{PAGE_LINES_MAX}, not {limit}")
    check_query(query)
    at = parse_cursor(cursor)
    if at is None:
        at = PageCursor(False, None, memories.toggle_stamp())
    elif memories.toggled_since(conn, user_id, at.since):
        raise ListChanged("the lines changed since this walk began")

    def read(closed: bool, before: int | None, n: int) -> list[Row]:
        found = memories.page_of(
            conn, user_id, closed=closed, before_id=before, limit=n, text=query
        )
        return [r for r in found if concerns_user(r, user_id)]

    rows: list[Row] = []
    before = at.before
    if not at.closed:
        rows = read(False, before, limit + 1)
        if len(rows) > limit:
            return rows[:limit], str(replace(at, before=rows[limit - 1].id))
        before = None
    more = read(True, before, limit - len(rows) + 1)
    if len(more) > limit - len(rows):
        taken = more[: limit - len(rows)]
        after = replace(at, closed=True, before=taken[-1].id if taken else None)
        return rows + taken, str(after)
    return rows + more, None


def parse_cursor(cursor: str | None) -> PageCursor | None:
    """A page cursor (`PageCursor` as text: "o.<id>.<since>" or "c.<id or 0>.<since>"), None
    for none; BadCursor for one `page_lines` never gave. Every number in it is ASCII digits in
    range (`numbers.whole_number`)."""
    if cursor is None or cursor == "":
        return None
    phase, *numbers = cursor.split(".")
    if phase not in ("o", "c") or len(numbers) != 2:
        raise BadCursor("not a page cursor")
    try:
        before = whole_number(numbers[0], "cursor", 0 if phase == "c" else 1, ID_MAX)
        since = whole_number(numbers[1], "cursor", 0, STAMP_MAX)
    except BadRequest:
        raise BadCursor("not a page cursor") from None
    return PageCursor(phase == "c", before or None, since)


def _counted(
    sections: list[PersonaSection], counts: dict[str, tuple[int, int, int]], names: dict[str, str]
) -> list[PersonaSection]:
    """The page's sections with every persona's counts and meter over all its lines, and a
    section (with no line on this page) for each persona that has lines elsewhere."""
    by_slug = {s.persona: s for s in sections}
    out = []
    for slug in sorted(by_slug.keys() | counts.keys()):
        opened, closed, meter = counts.get(slug, (0, 0, 0))
        section = by_slug.get(slug) or PersonaSection(slug, names.get(slug, slug), [], 0)
        out.append(replace(section, meter_chars=meter, open_count=opened, closed_count=closed))
    return out


def _witnessed(
    conn: Connection, user_id: int, rows: list[Row]
) -> tuple[dict[int, Line], set[int], dict[str, int]]:
    """The lines these rows cite, those of them the user witnessed, and the rooms (of the rows
    and their lines) the user is a member of → when they joined: what the page may show."""
    lines = rooms.lines_by_id(conn, {i for r in rows for i in r.evidence})
    rooms_cited = {r.room_id for r in rows} | {line.room_id for line in lines.values()}
    joined = rooms.memberships(conn, user_id, rooms_cited)
    return lines, witnessed_lines(user_id, lines, joined), joined


def witnessed_lines(user_id: int, lines: dict[int, Line], joined: dict[str, int]) -> set[int]:
    """Pure: of these lines, the ids of those the user witnessed — said in a room they are a
    member of, after they joined it (`joined`: room → its last line id when they did)."""
    return {
        i
        for i, line in lines.items()
        if line.room_id in joined and user_id in witnesses(i, {user_id: joined[line.room_id]})
    }


def group_by_persona(
    rows: Iterable[Row],
    user_id: int,
    names: dict[str, str],
    seen: set[int] | None = None,
    rooms_in: set[str] | None = None,
) -> list[PersonaSection]:
    """Pure: the user's rows as page sections, by persona slug; others' rows never pass.
    `seen`: the evidence lines the user witnessed, `rooms_in`: the rooms they are a member
    of — the page shows them only those (None: every one, for callers that checked)."""
    by_persona: dict[str, list[Row]] = {}
    for r in rows:
        if concerns_user(r, user_id):
            by_persona.setdefault(r.persona, []).append(r)
    sections = []
    for slug in sorted(by_persona):
        mine = sorted(by_persona[slug], key=lambda r: (r.valid_to is not None, -r.id))
        meter = block.meter(mine)  # the block's own count: world rows and promises too
        lines = [page_line(r, seen, rooms_in) for r in mine]
        closed = sum(1 for r in mine if r.valid_to is not None)
        section = PersonaSection(slug, names.get(slug, slug), lines, meter)
        sections.append(replace(section, open_count=len(mine) - closed, closed_count=closed))
    return sections


def page_line(r: Row, seen: set[int] | None = None, rooms_in: set[str] | None = None) -> PageLine:
    """Pure: a closed row stays on the page (greyed, with its arc): the arc is the history.
    Its origin and evidence only as far as the user witnessed them (`group_by_persona`)."""
    return PageLine(
        id=r.id,
        text=r.text,
        kind=r.kind,
        created=r.created[:10],
        valid_from=r.valid_from,
        valid_to=r.valid_to,
        closed=r.valid_to is not None,
        arc=span(r.valid_from, r.valid_to) if r.valid_to is not None else None,
        room_id=r.room_id if rooms_in is None or r.room_id in rooms_in else None,
        evidence=[i for i in r.evidence if seen is None or i in seen],
        delete_id=r.id,
    )


# --- who a row is about ----------------------------------------------------------------------


def concerns_user(row: Row, user_id: int) -> bool:
    """Pure: the row is about the user, is the persona's promise or loop with them, or is a
    world row that cites their lines (`rows.concerned`)."""
    return user_id in concerned(row.subject, row.counterpart, row.private_to)


def _check_user_and_persona(user_id: object, persona: object) -> None:
    check_id(user_id, "user_id")
    if not isinstance(persona, str):
        raise TypeError(f"persona must be a str, not {type(persona).__name__}")


def _require_user(conn: Connection, user_id: int) -> None:
    """UnknownUser for an unknown user — and for an id no database could hold."""
    if not _in_range(user_id):
        raise UnknownUser(user_id)
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

    Only the lines the page lists are looked up — those the user witnessed
    (`manage_page`) — so this answers exactly what the page may show; a line another human
    spoke is listed without its text.
    """
    cited = {line.id: line.evidence for s in page.personas for line in s.lines}
    with store.engine().connect() as conn:
        found = rooms.lines_by_id(conn, (i for ids in cited.values() for i in ids))
    me = human_ref(user_id)
    return {
        row_id: [_evidence_line(found[i], me) for i in ids if i in found]
        for row_id, ids in cited.items()
    }


def _evidence_line(x: Line, me: str) -> EvidenceLine:
    """A cited line as the user may see it: another human's words withheld."""
    return EvidenceLine(x.id, x.speaker, x.text if _may_quote(x.speaker, me) else None, x.created)


def _may_quote(speaker: str, me: str) -> bool:
    """The user's own words and a persona's; never another human's."""
    return speaker == me or human_id(speaker) is None


# --- the export: everything the page shows, every line of it (GDPR Art. 15 and 20) ----------


EXPORT_PAGE_ROWS = 500  # ours: rows read per step of an export, so a big store streams


@dataclass(frozen=True)
class ExportLine:
    """One line of an export: the page's line (`page_line`: its origin and evidence only as
    far as the user witnessed them), with its persona, its text with names, and its evidence
    lines (`evidence`: another human's words withheld)."""

    persona: str
    line: PageLine
    shown: str  # the text with names instead of `u:` ids, as the page shows it
    evidence: list[EvidenceLine]


def export_lines(
    user_id: int, before: int | None = None, limit: int = EXPORT_PAGE_ROWS
) -> tuple[list[ExportLine], int | None]:
    """One step of an export: up to `limit` of the rows the page lists for the user — open and
    closed alike, by id newest first, below `before` — and the `before` of the next step (None:
    that was the last). By id, whatever is open: a row closed or reopened meanwhile is still
    exported once."""
    check_id(user_id, "user_id")
    check_id(limit, "limit")
    with store.engine().connect() as conn:
        _require_user(conn, user_id)
        found = memories.page_of(conn, user_id, closed=None, before_id=before, limit=limit + 1)
        step = found[:limit]
        rows = [r for r in step if concerns_user(r, user_id)]
        lines, seen, joined = _witnessed(conn, user_id, rows)
        people = users.user_names(conn, sorted(toasts.mentioned(r.text for r in rows)))
    me = human_ref(user_id)
    out = []
    for r in rows:
        line = page_line(r, seen, set(joined))
        cited = [_evidence_line(lines[i], me) for i in line.evidence if i in lines]
        out.append(ExportLine(r.persona, line, toasts.named(r.text, people) + ".", cited))
    return out, (step[-1].id if len(found) > limit else None)


def export_notices(
    user_id: int, before: int | None = None, limit: int = EXPORT_PAGE_ROWS
) -> tuple[list[RailNotice], int | None]:
    """One step of the user's toasts, every one of them (the rail shows the newest), newest
    first below `before`, and the next step's `before` (None: the last)."""
    check_id(user_id, "user_id")
    check_id(limit, "limit")
    with store.engine().connect() as conn:
        found = notices.of_user_before(conn, user_id, before, limit + 1)
    step = [RailNotice(n.id, n.persona, n.room_id, n.text, n.created, n.undone) for n in found]
    return step[:limit], (step[limit - 1].id if len(step) > limit else None)


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
            raise NotFound("persona", repr(persona), user_id)
        room_id = f"room-{secrets.token_hex(6)}"
        members = [human_ref(user_id), persona]
        rooms.add_room(conn, room_id, "private", members, incognito=incognito)
        return room_id
