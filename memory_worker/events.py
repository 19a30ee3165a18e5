"""What the app calls. Each checks the room exists (a clear error now, not a lost message
later) and enqueues; none waits for a model, nor long for the broker.

What the app says is already in the store when it calls these: the message only saves the
sweep a wait. So a publish gets MW_PUBLISH_TIMEOUT_S (1 s) and no retries; one that fails or
is still stuck then is left to the sweep, with one log line (once `room_quiet` blocked
36 s and raised while the broker restarted). The store gets the same bound: with the database
away (a restart, a lock held) a call logs once and returns (once `room_quiet` raised the
database's error at each of 24 calls during restarts): a quiet or archived room's fan-out is
sent all the same and waits for the store, so its spells start once the store is back; a topic
or a rename is not recorded then (the app says it again).

    room_quiet(room_id)            the presence gate booked a quiet spell: write memories
    room_archived(room_id)         flush what is left before the room goes away
    room_opened(room_id, topic)    remember the opener/topic; its vector is computed off the floor
    user_renamed(user_id, name)    a new display name; rows that name them are embedded again
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import Task
from sqlalchemy import Connection

from memory_worker.core import settings as settings_mod
from memory_worker.storage import rooms, store, users
from memory_worker.storage.outage import is_store_outage
from memory_worker.tasks.celery_app import send_at_once
from memory_worker.tasks.rooms import on_room_quiet, reembed_user, room_topic
from memory_worker.tasks.store_step import left_to_sweep

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
            send_at_once(task, *args)
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


def in_store(
    what: str,
    work: Callable[[Connection], object],
    *,
    write: bool = False,
    left_to: str = "the sweep",
) -> bool:
    """Run `work` on a connection (in a transaction when `write`). False (logged once, ids
    only) when the store is away (`storage.outage`): the app never sees a database restart,
    and the sweep finds the work once the store is back. Any other error (`UnknownRoom`: a
    clear error now) is raised.

    A store that refuses, drops or is starting answers at once; a SQLite write meets another
    process's lock after the busy timeout; a server that hangs without answering is bounded by
    the driver's connect timeout (PostgreSQL: `connect_timeout` in the URL)."""
    try:
        with store.transaction() if write else store.engine().connect() as conn:
            work(conn)
    except Exception as e:
        if not is_store_outage(e):
            raise
        left_to_sweep(what, e, left_to)
        return False
    return True


FAN_OUT_WAITS = "the fan-out, which waits for it"


def room_quiet(room_id: str) -> None:
    """With the store away the room cannot be checked, but the fan-out is sent all the same:
    it waits for the store (`tasks.store_step`) and starts the room's spells the moment the
    store is back — not a sweep's cadence later (a 5-s restart once held 63 rooms' toasts for
    20–30 s). An unknown room is then logged by the fan-out, not raised to the app."""

    def check(conn: Connection) -> None:
        rooms.require_room(conn, room_id)  # UnknownRoom: a clear error now

    in_store(f"room_quiet({room_id!r})", check, left_to=FAN_OUT_WAITS)
    publish(on_room_quiet, room_id)


def room_archived(room_id: str) -> None:
    """With the store away the room is not marked archived (say so again later); its lines are
    still written, by the fan-out that waits for the store (as `room_quiet`'s)."""

    def archive(conn: Connection) -> None:
        rooms.require_room(conn, room_id)
        rooms.set_archived(conn, room_id)

    in_store(f"room_archived({room_id!r})", archive, write=True, left_to=FAN_OUT_WAITS)
    publish(on_room_quiet, room_id)


def room_opened(room_id: str, topic: str | None = None) -> None:
    """With the store away the topic is not kept (the room works without it)."""

    def remember(conn: Connection) -> None:
        rooms.require_room(conn, room_id)
        if topic:
            rooms.set_topic(conn, room_id, topic)

    if in_store(f"room_opened({room_id!r})", remember, write=True) and topic:
        room_topic.delay(room_id)


def user_renamed(user_id: int, name: str) -> None:
    """Rows say `u:42`, never a name (the id survives a rename); they are embedded with the
    name, so a question that names someone finds them — and embedded again when it changes.
    With the store away the name is not changed (say so again later)."""
    if in_store(
        f"user_renamed({user_id})", lambda c: users.rename_user(c, user_id, name), write=True
    ):
        reembed_user.delay(user_id)
