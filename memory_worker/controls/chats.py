"""Start a chat: a private room between the user and a persona, incognito or not."""

from __future__ import annotations

import secrets

from memory_worker.controls.checks import (
    check_switch,
    check_user_and_persona,
    require_persona,
)
from memory_worker.core.rows import human_ref
from memory_worker.storage import rooms, store


def start_room(user_id: int, persona: str, *, incognito: bool) -> str:
    """A private room between the user and a persona. Incognito is chosen here, at creation,
    and never flipped later: a switch cannot make a room's past remembered or forgotten."""
    check_user_and_persona(user_id, persona)
    check_switch(incognito, "incognito")
    with store.transaction() as conn:
        require_persona(conn, user_id, persona)
        room_id = f"room-{secrets.token_hex(6)}"
        members = [human_ref(user_id), persona]
        rooms.add_room(conn, room_id, "private", members, incognito=incognito)
        return room_id
