"""Bringing a held entry to a newer version by this process's own touches: pure functions.

The read cache's second part (cache.py). A touch this process wrote moves a persona's version
from `before` to `after` and changes only the touched rows' recency and recall count, which
the process knows without reading them again. An entry (or full rows) read at some version
is brought to another by the touches that lead there exactly, in order; when some other write
lies between, nothing here can say what changed and the answer is None (the change log then
decides: `cache_loader.patched_entry`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from memory_worker.core.read_columns import Batches, PersonaRows, Version
from memory_worker.core.rows import Row

OWN_TOUCHES_KEPT = 8  # ours: a persona's touches kept to bring a read begun before them forward
WINNERS_KEPT = 256  # ours: full rows of recent winners an entry keeps, at most (then afresh)
VIEWS_KEPT = 3  # ours: audiences an entry keeps its visible rows for (`View`), the latest ones

Move = tuple[Version, Version, Batches]  # a touch: the version before, after, the rows touched


def forward(rows: PersonaRows, touches: Iterable[Move], to: Version) -> PersonaRows | None:
    """`rows` with the touches since its version applied, if they lead exactly to `to`."""
    for before, after, batches in touches:
        if rows.version == to:
            break
        if rows.version == before:
            rows = rows.touched(batches, after)
    return rows if rows.version == to else None


def forward_rows(
    found: Mapping[int, Row], version: Version, touches: Iterable[Move], to: Version
) -> dict[int, Row] | None:
    """Full rows read at `version`, with the touches since applied, if they lead exactly to
    `to`."""
    out = dict(found)
    for before, after, batches in touches:
        if version == to:
            break
        if version == before:
            for ids, _day, stamp, times in batches:
                for i in ids.tolist():
                    if (row := out.get(i)) is not None:
                        out[i] = replace(
                            row, last_recalled=stamp, recall_count=row.recall_count + times
                        )
            version = after
    return out if version == to else None


def with_winners(rows: PersonaRows, found: Mapping[int, Row]) -> PersonaRows:
    """`rows` keeping these winners' full rows too, the oldest kept let go of past
    WINNERS_KEPT."""
    kept = {**rows.winners, **found}
    for _ in range(len(kept) - WINNERS_KEPT):
        del kept[next(iter(kept))]
    return replace(rows, winners=kept)


def kept_with(rows: PersonaRows, held: PersonaRows) -> PersonaRows:
    """`rows` taking what the entry held at the same version kept meanwhile (winners' rows
    remembered and views made while `rows` was being read: a fill's, say), so a put never
    throws away what an open kept since."""
    views = {**held.views, **rows.views}
    while len(views) > VIEWS_KEPT:
        del views[next(iter(views))]
    return replace(with_winners(rows, held.winners), views=views)
