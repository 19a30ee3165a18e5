"""What the app calls. Each checks the room exists (a clear error now, not a lost message
later) and enqueues; none waits for a model.

    room_quiet(room_id)            the presence gate booked a quiet spell: write memories
    room_archived(room_id)         flush what is left before the room goes away
    room_opened(room_id, topic)    remember the opener/topic; its vector is computed off the floor
    user_renamed(user_id, name)    a new display name; rows that name them are embedded again
"""

from __future__ import annotations

from memory_worker import store
from memory_worker.storage import rooms, users
from memory_worker.tasks.rooms import on_room_quiet, reembed_user, room_topic


def room_quiet(room_id: str) -> None:
    with store.engine().connect() as conn:
        rooms.require_room(conn, room_id)
    on_room_quiet.delay(room_id)


def room_archived(room_id: str) -> None:
    with store.transaction() as conn:
        rooms.require_room(conn, room_id)
        rooms.set_archived(conn, room_id)
    on_room_quiet.delay(room_id)


def room_opened(room_id: str, topic: str | None = None) -> None:
    with store.transaction() as conn:
        rooms.require_room(conn, room_id)
        if topic:
            rooms.set_topic(conn, room_id, topic)
    if topic:
        room_topic.delay(room_id)


def user_renamed(user_id: int, name: str) -> None:
    """Rows say `u:42`, never a name (the id survives a rename); they are embedded with the
    name, so a question that names someone finds them — and embedded again when it changes."""
    with store.transaction() as conn:
        users.rename_user(conn, user_id, name)
    reembed_user.delay(user_id)
