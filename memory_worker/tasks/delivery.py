"""Toasts told: from the outbox (docs/design.md §10.10) to each human's channel.

The commit writes a spell's toasts in its transaction; this tells them. Each toast is published
on its human's channel (`ops.toast_bus`, ids only), then marked delivered: a crash in between
delivers twice rather than never. A toast not told stays undelivered for the commit's retry,
the room's next commit or the sweep — whichever comes first.
"""

from __future__ import annotations

from memory_worker.core.errors import ToastNotPublished
from memory_worker.core.rows import Spell
from memory_worker.ops import broker, toast_bus
from memory_worker.storage.notices import Notice
from memory_worker.storage.outage import is_store_outage
from memory_worker.tasks.celery_app import app
from memory_worker.tasks.store_step import left_to_sweep
from memory_worker.write import steps


def deliver(waiting: list[Notice]) -> int:
    """Tell each toast's human channel, then mark those told delivered. Returns how many were
    not told (0: all were)."""
    bus = broker.client(app.conf.broker_url)
    told = [
        n
        for n in waiting
        if toast_bus.publish(
            bus, toast_bus.ToastPosted(n.id, n.user_id, n.persona, n.room_id, n.row_ids)
        )
    ]
    steps.mark_delivered(told)
    return len(waiting) - len(told)


def deliver_room(spell: Spell) -> int:
    """The commit's delivery: every toast of the spell's persona in its room nobody delivered
    yet — the spell's own, and any an earlier spell of the room left when its worker or broker
    died before it told them. Returns how many were not told."""
    return deliver(steps.place_toasts(spell.persona, spell.room_id))


def deliver_spell(spell_key: str) -> int:
    """The sweep's delivery: one spell's undelivered toasts. Returns how many were told;
    raises ToastNotPublished (the task retries) unless all were. With the store away they stay
    in the outbox, where the sweep finds them once it is back: 0."""
    try:
        waiting = steps.pending_toasts(spell_key)
        untold = deliver(waiting)
    except Exception as e:
        if not is_store_outage(e):
            raise
        left_to_sweep(f"toasts of spell {spell_key}", e)
        return 0
    if untold:
        raise ToastNotPublished(f"{untold} of {len(waiting)} toast(s)")
    return len(waiting)
