"""A page walk's cursor: where the walk is and when it began, as text the page hands back.
Anything `page_lines` never gave is a BadCursor."""

from __future__ import annotations

from dataclasses import dataclass

from memory_worker.controls.checks import ID_MAX
from memory_worker.core.errors import (
    BadCursor,
    BadRequest,
)
from memory_worker.core.numbers import whole_number

STAMP_MAX = 2**63 - 1  # a walk's start (`memories.toggle_stamp`) fits a database integer


@dataclass(frozen=True)
class PageCursor:
    """Where a page walk is: in the closed half or not, below which id (None: from the top of
    the half), and when the walk began (`memories.toggle_stamp`)."""

    closed: bool
    before: int | None
    since: int

    def __str__(self) -> str:
        return f"{'c' if self.closed else 'o'}.{self.before or 0}.{self.since}"


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
