"""Provenance: who witnessed a line, and who may change a world row (docs/design.md §12).

Who may *know* a row is decided before its model call runs, by its label (`core.labels`):
nothing here reads what the model wrote. What is left is the store's own facts:

- a line's witnesses are the room's members who had joined before it was said (their
  switches at that time are `core.labels`' part);
- the router may change (UPDATE, CLOSE) a world row only when its audience is exactly the
  new row's: nobody loses, and nobody learns of, a row through a spell they did not witness.
"""

from __future__ import annotations

from collections.abc import Mapping

from memory_worker.core.labels import Label


def witnesses(line_id: int, joined: Mapping[int, int]) -> frozenset[int]:
    """The humans who witnessed line `line_id`: of the room's members (`joined`: id → the
    room's last line id when they joined, `room_members.since_line`), those who had joined
    before it was said."""
    return frozenset(u for u, since in joined.items() if since < line_id)


def may_change(target: Label, audience: Label) -> bool:
    """May a spell whose rows reach `audience` UPDATE or CLOSE a world row held by `target`?
    Only when they are the same people: closing a row some of its holders did not witness the
    reason for would tell them something, and a public row is changed only by the news."""
    return target == audience
