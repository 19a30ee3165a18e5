"""The router's view of the open rows, and whether it still holds when the spell commits.

The router reads the persona's open rows in the spell's scope (`memories.open_rows`) and the
spell carries their fingerprint (`route.fingerprint`); the commit may apply its decisions only
while that set of rows is the same (docs/design.md §10.4), else the spell is 'stale'. Reading
the set again costs what the persona holds about the spell's humans (seconds at 100k rows), so
the router also notes when it read (`AsOf`): the persona's version before its read (the
version triggers log each row a write touched: schema/versions/0006) and the store's highest
row id after it. The commit then reads only the rows written since:

- none: the set is the one the router read;
- each either newer than the router's read (it saw none of them: one now in the set changes
  it) or a row the set never holds (about other subjects or people: what a row is about is
  never rewritten): the set changed exactly when one of the newer rows is in it now;
- any other (a row of the set closed, reopened, recalled or deleted, or one written while the
  router read), or a change log that cannot say (a spell routed before this, 1,024 writes
  since, another store), or a scope that is not the router's: the set is read again whole
  and its fingerprint compared, as before.

Same outcomes as reading the set each time, only fewer rows read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Connection

from memory_worker.core.audience import Scope
from memory_worker.core.read_columns import Version
from memory_worker.core.rows import Spell
from memory_worker.storage import memories, read_path
from memory_worker.write import route


@dataclass(frozen=True)
class AsOf:
    """When the router read the open rows: the persona's version before, the store's highest
    row id after, and which scope and subjects (`scope_key`)."""

    version: Version
    high: int
    scope: str

    def token(self) -> str:
        return json.dumps([self.version.counter, self.version.stamp, self.high, self.scope])

    @classmethod
    def parse(cls, token: str | None) -> AsOf | None:
        """None for a spell that carries none, or one this code cannot read."""
        try:
            counter, stamp, high, scope = json.loads(token or "null")
            return cls(
                Version(int(counter), None if stamp is None else int(stamp)), int(high), str(scope)
            )
        except (TypeError, ValueError):
            return None


def scope_key(scope: Scope, subjects: set[str]) -> str:
    """The scope and subjects a set of open rows was read for, as a hash."""
    parts: dict[str, Any] = {
        f.name: sorted(v) if isinstance(v := getattr(scope, f.name), frozenset) else v
        for f in fields(scope)
    }
    parts["subjects"] = sorted(subjects)
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def read(conn: Connection, scope: Scope, subjects: set[str]) -> tuple[list[memories.OpenRow], AsOf]:
    """The router's read: the open rows, and when (the version first, the highest id last, so
    every write between the two is either logged after the version or above the id)."""
    version = read_path.versions(conn, [scope.persona])[scope.persona]
    rows = memories.open_rows(conn, scope, subjects)
    return rows, AsOf(version, memories.highest_id(conn), scope_key(scope, subjects))


def shown(
    conn: Connection, spell: Spell, scope: Scope, subjects: set[str], ids: list[int]
) -> dict[int, memories.OpenRow] | None:
    """The open rows of the router's view among `ids` (the rows its decisions name), by id;
    None when the view no longer holds (stale: route again)."""
    if not spell.candidates:
        return {}
    holds = _holds(conn, spell, scope, subjects)
    if holds is None:  # the log cannot say: the whole set, as the router read it
        rows = memories.open_rows(conn, scope, subjects)
        if route.fingerprint(rows) != spell.seen_open_rows:
            return None
        wanted = set(ids)
        return {r.id: r for r in rows if r.id in wanted}
    if not holds:
        return None
    return memories.rows_in_view(conn, scope, subjects, ids)[0]


def _holds(conn: Connection, spell: Spell, scope: Scope, subjects: set[str]) -> bool | None:
    """Whether the set of open rows is the router's, from the rows written since it read
    them; None when those cannot say (see the module's docstring)."""
    seen = AsOf.parse(spell.seen_as_of)
    if seen is None or seen.scope != scope_key(scope, subjects):
        return None
    now = read_path.versions(conn, [scope.persona])[scope.persona]
    if now == seen.version:
        return True
    changed = read_path.changed_rows(conn, scope.persona, seen.version, now)
    if changed is None:
        return None
    in_set, elsewhere = memories.rows_in_view(conn, scope, subjects, sorted(changed))
    if any(i > seen.high and i in in_set for i in changed):
        return False
    if all(i > seen.high or i in elsewhere for i in changed):
        return True
    return None
