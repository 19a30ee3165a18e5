"""The app's side of the contract: what the chat app writes (users, personas, rooms, lines).

The app is not in this repo; the demo, the tests, the exams and the benchmarks play it through
these names, so they all write the contract in `schema/` the same way. The SQL lives in the
storage seam (`memory_worker.storage.rooms` / `.users`); this module only names the app's part.
"""

from __future__ import annotations

from memory_worker.core.errors import UnknownRoom
from memory_worker.storage.rooms import (
    add_room,
    join,
    load_room,
    members,
    require_room,
    say,
    set_kit_mounted,
)
from memory_worker.storage.users import add_persona, add_user, persona_names

__all__ = [
    "UnknownRoom",
    "add_persona",
    "add_room",
    "add_user",
    "join",
    "load_room",
    "members",
    "persona_names",
    "require_room",
    "say",
    "set_kit_mounted",
]
