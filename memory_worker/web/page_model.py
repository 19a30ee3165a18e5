"""The human's page as plain dataclasses the page, the API, the app and the export render
(docs/design.md §5): only rows that concern the user, and of their origin and evidence only
what the user witnessed — lines said while they were in the room, rooms they are a member of.
Another human's words are withheld. Reads only; the controls write."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection

from memory_worker.controls.checks import ID_MAX, check_id, concerns_user, in_range, require_user
from memory_worker.controls.follow import group_scope, may_follow
from memory_worker.core import block
from memory_worker.core.block import span
from memory_worker.core.constants import BLOCK_CHARS_LIMIT
from memory_worker.core.errors import (
    BadRequest,
    BadSearch,
    ListChanged,
)
from memory_worker.core.provenance import witnesses
from memory_worker.core.rows import Line, Row, human_id, human_ref
from memory_worker.storage import memories, notices, rooms, store, users
from memory_worker.web.cursors import PageCursor, parse_cursor


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
        require_user(conn, user_id)
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
        _, seen, joined = witnessed(conn, user_id, rows)
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


def witnessed(
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
    if not in_range(user_id) or not 0 <= after_id <= ID_MAX:
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
        row_id: [evidence_line(found[i], me) for i in ids if i in found]
        for row_id, ids in cited.items()
    }


def evidence_line(x: Line, me: str) -> EvidenceLine:
    """A cited line as the user may see it: another human's words withheld."""
    return EvidenceLine(x.id, x.speaker, x.text if _may_quote(x.speaker, me) else None, x.created)


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
