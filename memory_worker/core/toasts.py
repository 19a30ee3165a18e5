"""The toast (docs/design.md §2.5): one notice per persona per human per spell, naming its rows.

"Warren noted: Dan owns a flat in Xuhui · undo". A human is told about the rows about them,
about the persona's promises and loops with them, and about world rows whose audience holds
them (who witnessed the lines they cite).
Keyed by (spell, user): a second run inserts nothing. Undo lives in `memory_worker.controls`;
when rows are deleted, the toasts that quoted them are reworded without them (`redacted`).

Pure wording, shared by the write path (`write.commit` writes the toasts), the human's
controls (rewording after a delete) and the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from memory_worker.core.rows import Row, concerned

TOAST_MAX_CHARS = 280  # a rail notice, not a page: longer toasts end in "(+N more)"
HUMAN_REF = re.compile(r"\bu:(\d+)\b")


@dataclass(frozen=True)
class Toast:
    user_id: int
    text: str
    row_ids: list[int]


def toasts(
    persona_name: str,
    rows: Iterable[Row],
    names: dict[int, str],
    *,
    also: Mapping[int, Iterable[Row]] | None = None,
    in_group: Mapping[int, bool] | None = None,
) -> list[Toast]:
    """Pure: group new rows by the humans they concern (`rows.concerned`: a world row's
    humans are its audience) and word one toast each. `also`: rows one human joined the
    audience of (they stated them), toasted to that human alone. `in_group`: for a spell in a
    group, each human → whether what was noted may follow them into groups (`group_clause`)."""
    by_user: dict[int, list[Row]] = {}
    for r in rows:
        for uid in concerned(r.subject, r.counterpart, r.private_to):
            by_user.setdefault(uid, []).append(r)
    for uid, joined in (also or {}).items():
        by_user.setdefault(uid, []).extend(joined)
    out = []
    for uid in sorted(by_user):
        items = sorted(by_user[uid], key=lambda r: r.id)
        texts = [named(r.text, names) for r in items]
        clause = None if in_group is None else group_clause(persona_name, in_group.get(uid, False))
        out.append(Toast(uid, _word(persona_name, texts, clause), [r.id for r in items]))
    return out


def group_clause(persona_name: str, follows: bool) -> str:
    """What a toast of a spell in a group says of where it may come up: with the group scope
    and the human's switch on, in groups they are in; else only where everyone present heard
    it (in the proven scope, or with the switch off, what is one person's stays theirs)."""
    if follows:
        return f"{persona_name} may bring this up in groups you're in"
    return f"{persona_name} brings this up only where everyone present heard it"


def redacted(persona_name: str, remaining: list[str], removed: int) -> str:
    """Pure: a toast after some of its rows were deleted — the rest as before, and how many
    were removed, never what they said."""
    gone = "a memory was removed" if removed == 1 else f"{removed} memories were removed"
    if not remaining:
        return f"{persona_name} noted something; {gone}."
    return f"{_word(persona_name, remaining)} ({gone})"


def named(text: str, names: dict[int, str]) -> str:
    """Row texts name people by id (survives a rename); a toast names them as people do."""
    return HUMAN_REF.sub(lambda m: names.get(int(m.group(1)), m.group(0)), text).rstrip(".")


def mentioned(texts: Iterable[str]) -> set[int]:
    """The human ids row texts name (`u:42`), to look their names up for `named`."""
    return {int(i) for text in texts for i in HUMAN_REF.findall(text)}


def _word(persona_name: str, texts: list[str], clause: str | None = None) -> str:
    """As many of the texts as fit TOAST_MAX_CHARS (always at least one), then "(+N more)";
    a spell in a group says where it may come up (`clause`)."""
    head = f"{persona_name} noted in a group: " if clause else f"{persona_name} noted: "
    tail = f" · {clause} · undo" if clause else " · undo"
    for shown in range(len(texts), 0, -1):
        more = len(texts) - shown
        body = "; ".join(texts[:shown]) + (f" (+{more} more)" if more else "")
        if len(head + body + tail) <= TOAST_MAX_CHARS or shown == 1:
            return head + body + tail
    return head.rstrip(": ") + tail
