"""The export's reads (`web.export` writes the document from them): everything the page lists
for one human, a step at a time, as the page shows it — each row's origin and evidence only as
far as the human witnessed them, another human's words withheld — and every toast of theirs.
Reads only."""

from __future__ import annotations

from dataclasses import dataclass

from memory_worker.controls.checks import check_id, concerns_user, require_user
from memory_worker.core import toasts
from memory_worker.core.rows import human_ref
from memory_worker.storage import memories, notices, store, users
from memory_worker.web.page_model import (
    EvidenceLine,
    PageLine,
    RailNotice,
    evidence_line,
    page_line,
    witnessed,
)

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
        require_user(conn, user_id)
        found = memories.page_of(conn, user_id, closed=None, before_id=before, limit=limit + 1)
        step = found[:limit]
        rows = [r for r in step if concerns_user(r, user_id)]
        lines, seen, joined = witnessed(conn, user_id, rows)
        people = users.user_names(conn, sorted(toasts.mentioned(r.text for r in rows)))
    me = human_ref(user_id)
    out = []
    for r in rows:
        line = page_line(r, seen, set(joined))
        cited = [evidence_line(lines[i], me) for i in line.evidence if i in lines]
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
