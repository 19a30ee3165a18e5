"""What the app calls. Each checks the room exists (a clear error now, not a lost message
later) and enqueues; none waits for a model.

    room_quiet(room_id)            the presence gate booked a quiet spell: write memories
    room_archived(room_id)         flush what is left before the room goes away
    room_opened(room_id, topic)    remember the opener/topic; its vector is computed off the floor
"""

from __future__ import annotations

from memory_worker import store
from memory_worker.storage import rooms
from memory_worker.tasks.rooms import on_room_quiet, room_topic


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
