"""What the app calls. Each checks the room exists (a clear error now, not a lost message
later) and enqueues; none waits for a model, nor long for the broker.

What the app says is already in the store when it calls these: the message only saves the
sweep a wait. So a publish gets MW_PUBLISH_TIMEOUT_S (1 s) and no retries; one that fails or
is still stuck then is left to the sweep, with one log line (once `room_quiet` blocked
36 s and raised while the broker restarted).

    room_quiet(room_id)            the presence gate booked a quiet spell: write memories
    room_archived(room_id)         flush what is left before the room goes away
    room_opened(room_id, topic)    remember the opener/topic; its vector is computed off the floor
    user_renamed(user_id, name)    a new display name; rows that name them are embedded again
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Task

from memory_worker.core import settings as settings_mod
from memory_worker.storage import rooms, store, users
from memory_worker.tasks.rooms import on_room_quiet, reembed_user, room_topic

log = logging.getLogger(__name__)


def publish(task: Task, *args: Any) -> bool:
    """Send `task` with `args` within MW_PUBLISH_TIMEOUT_S, no retries. False (logged once,
    ids only) when the broker did not take it: the sweep will find the work.

    The send runs on a daemon thread: one stuck on a broker that went away keeps its thread
    until kombu gives up, and neither the app's call nor the app's exit waits for it."""
    timeout = settings_mod.current().publish_timeout_s
    done, failed = threading.Event(), []

    def send() -> None:
        try:
            task.apply_async(args, retry=False)
        except Exception as e:  # the broker refused or is away: whatever kombu raised
            failed.append(type(e).__name__)
        finally:
            done.set()

    threading.Thread(target=send, name="mw-publish", daemon=True).start()
    if done.wait(timeout) and not failed:
        return True
    why = failed[0] if failed else f"no answer within {timeout:g}s"
    log.warning("%s%r not published (%s); the sweep will find it", task.name, args, why)
    return False


def room_quiet(room_id: str) -> None:
    with store.engine().connect() as conn:
        rooms.require_room(conn, room_id)
    publish(on_room_quiet, room_id)


def room_archived(room_id: str) -> None:
    with store.transaction() as conn:
        rooms.require_room(conn, room_id)
        rooms.set_archived(conn, room_id)
    publish(on_room_quiet, room_id)


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
