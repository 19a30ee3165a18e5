"""The export: everything the personas hold about a human, to take away (GDPR Art. 15, 20).

What the page shows them, every line of it: their note and switches, their rooms, every row
they are in the audience of — open and closed, with its arc — with the evidence lines they
witnessed (another human's words withheld, exactly as on the page), and every toast of theirs.
As JSON (`SCHEMA`, documented in docs/api.md) or as Markdown a person can read.

It streams: the rows are read `export_model.EXPORT_PAGE_ROWS` at a time
(`export_model.export_lines`, by id, so a row closed or reopened meanwhile is still exported
once) and written as they come, so a human with 100,000 rows is never held in memory.
`GET /api/export`, the page's button and `memory-worker export` all write `document`. The log
gets the user id, the format and the counts, never a line of the content.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from memory_worker.web import export_model
from memory_worker.web.export_model import ExportLine

log = logging.getLogger(__name__)
Item = TypeVar("Item")

SCHEMA = "memory-worker-export/1"
FORMATS = {  # ?format= → (media type, file extension)
    "json": ("application/json", "json"),
    "md": ("text/markdown; charset=utf-8", "md"),
}
EXPORTS_PER_WINDOW = 5  # ours: exports one user may start per window, per server process
EXPORT_WINDOW_S = 300.0


class ExportLimiter:
    """At most `per_window` exports started per user in any `window_s` (a sliding window, in
    this process): an export reads everything about its human, so it is not a loop's target."""

    def __init__(self, per_window: int = EXPORTS_PER_WINDOW, window_s: float = EXPORT_WINDOW_S):
        self.per_window = per_window
        self.window_s = window_s
        self._started: dict[int, deque[float]] = {}
        self._lock = threading.Lock()

    def take(self, user_id: int) -> float | None:
        """None: the export may start (and is counted); else the seconds until one may."""
        now = time.monotonic()
        with self._lock:
            started = self._started.setdefault(user_id, deque())
            while started and started[0] <= now - self.window_s:
                started.popleft()
            if len(started) >= self.per_window:
                return started[0] + self.window_s - now
            started.append(now)
            return None


def filename(user_id: int, fmt: str, today: str) -> str:
    return f"memories-u{user_id}-{today}.{FORMATS[fmt][1]}"


def expected_lines(head: dict[str, Any]) -> int:
    """How many lines the export will hold: every persona's counts on the page."""
    return sum(int(s["open_count"]) + int(s["closed_count"]) for s in head["personas"])


def document(user_id: int, fmt: str, head: dict[str, Any], now: str) -> Iterator[str]:
    """The export of `user_id` in `fmt`, a piece at a time. `head` is the page's data
    (`web.app.page_data`): the note, switches, rooms and names, as the page shows them."""
    counts = {"lines": 0, "notices": 0}
    write = _json if fmt == "json" else _markdown
    yield from write(user_id, head, now, counts)
    log.info(
        "export: user %d, %s, %d lines, %d toasts",
        user_id,
        fmt,
        counts["lines"],
        counts["notices"],
    )


def _steps(
    read: Callable[[int, int | None], tuple[list[Item], int | None]], user_id: int
) -> Iterator[list[Item]]:
    """Every step of `read` (`export_model.export_lines`, `export_notices`), each on its own."""
    before: int | None = None
    while True:
        step, before = read(user_id, before)
        yield step
        if before is None:
            return


def line_json(x: ExportLine, names: dict[str, str]) -> dict[str, Any]:
    """One line of the JSON export (docs/api.md, "Export")."""
    line = _fields(x.line)
    line.pop("delete_id")
    return {
        "persona": x.persona,
        "persona_name": names.get(x.persona, x.persona),
        **line,
        "shown": x.shown,
        "evidence_lines": [_fields(e) for e in x.evidence],
    }


def _fields(item: Any) -> dict[str, Any]:
    """A flat dataclass's fields (`asdict` deep-copies each value: half an export's time)."""
    return dict(vars(item))


def _json(user_id: int, head: dict[str, Any], now: str, counts: dict[str, int]) -> Iterator[str]:
    top = {
        "schema": SCHEMA,
        "user_id": user_id,
        "exported_at": now,
        "note": head["note"],
        "memory_on": head["memory_on"],
        "group_scope": head["group_scope"],
        "switches": head["switches"],
        "rooms": head["rooms"],
        "persona_names": head["persona_names"],
    }
    names = head["persona_names"]
    yield json.dumps(top, ensure_ascii=False)[:-1] + ', "lines": ['
    for step in _steps(export_model.export_lines, user_id):
        yield _json_items([line_json(x, names) for x in step], first=not counts["lines"])
        counts["lines"] += len(step)
    yield '\n], "notices": ['
    for notes in _steps(export_model.export_notices, user_id):
        yield _json_items([_fields(n) for n in notes], first=not counts["notices"])
        counts["notices"] += len(notes)
    yield f'\n], "counts": {json.dumps(counts)}}}\n'


def _json_items(items: list[dict[str, Any]], *, first: bool) -> str:
    """Items of a JSON list, one a line (what the page's progress counts), comma-joined to
    those written before."""
    said = ",\n".join(json.dumps(item, ensure_ascii=False) for item in items)
    return ("\n" if first else ",\n") + said if items else ""


_INERT = str.maketrans({c: f"\\{c}" for c in "\\<>[]"})


def _one_line(text: str | None) -> str:
    """A text someone wrote, as one Markdown line that stays text: no HTML, no link (a
    viewer would otherwise render `<script>` or `[x](javascript:…)` from a chat line)."""
    return " ".join((text or "").split()).translate(_INERT)


def _markdown(
    user_id: int, head: dict[str, Any], now: str, counts: dict[str, int]
) -> Iterator[str]:
    names = head["persona_names"]
    out = [
        "# What personas remember about you\n",
        f"User u:{user_id} · exported {now} · the same as JSON: `?format=json`\n",
        "## Your note\n",
        f"> {_one_line(head['note'])}\n" if head["note"] else "No note.\n",
        "## Switches\n",
        f"- Personas remember me: {'on' if head['memory_on'] else 'off'}",
    ]
    for sw in head["switches"]:
        groups = "may come up" if sw["follows_into_groups"] else "stays private"
        forget = "on" if sw["forget_me"] else "off"
        out.append(f"- {sw['name']}: forget me {forget} · in groups: {groups}")
    out.append("\n## Rooms\n")
    for r in head["rooms"]:
        badge = " (incognito)" if r["incognito"] else ""
        out.append(
            f"- {r['kind']} room `{r['id']}` with {', '.join(r['names']) or 'no persona'}{badge}"
        )
    out.append("\n## What they remember\n\nNewest first; a line no longer true has its arc.\n")
    yield "\n".join(out) + "\n"
    for step in _steps(export_model.export_lines, user_id):
        yield "".join(_markdown_line(x, names, user_id) for x in step)
        counts["lines"] += len(step)
    yield "\n## Toasts\n\n"
    for notes in _steps(export_model.export_notices, user_id):
        yield "".join(
            f"- {n.created[:16].replace('T', ' ')} · {_one_line(n.text)}"
            f"{' · undone' if n.undone else ''}\n"
            for n in notes
        )
        counts["notices"] += len(notes)
    yield f"\n{counts['lines']} lines, {counts['notices']} toasts.\n"


def _markdown_line(x: ExportLine, names: dict[str, str], user_id: int) -> str:
    line = x.line
    state = f"no longer true ({line.arc})" if line.closed else "true now"
    where = f"in room {line.room_id}" if line.room_id else "first heard in a chat you were not in"
    said = [
        f"- **{names.get(x.persona, x.persona)}**: {_one_line(x.shown)} — "
        f"{line.kind.replace('_', ' ')} · noted {line.created} · {where} · {state}\n"
    ]
    for e in x.evidence:
        who = "you" if e.speaker == f"u:{user_id}" else names.get(e.speaker, e.speaker)
        if e.text is None:
            said.append(
                f"  - someone else ({e.created[:10]}): (another person's words, not shown)\n"
            )
        else:
            said.append(f"  - {who} ({e.created[:10]}): {_one_line(e.text)}\n")
    return "".join(said)
