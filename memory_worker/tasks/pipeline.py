"""The chain's tasks: extract → embed → route → commit → notify_toast.

Each is a thin shell over `memory_worker.write.pipeline`: the JSON message in, the step, the
JSON message out. What a model fault means (retry, park) is the `ModelStep` base class's
business (`memory_worker.tasks.model_step`); the commit and the toast retry only a locked
database.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery import Task, chain
from celery.canvas import Signature
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import OperationalError

from memory_worker import broker, metrics, models, spell_log, toast_bus
from memory_worker.celery_app import app
from memory_worker.constants import DB_MAX_RETRIES, STALE_REROUTES_MAX
from memory_worker.rows import Spell
from memory_worker.tasks.model_step import ModelStep
from memory_worker.write import pipeline

log = logging.getLogger(__name__)
Message = dict[str, Any]


@app.task(name="memory_worker.extract", bind=True, base=ModelStep)
def extract(self: ModelStep, spell: Message) -> Message:
    return self.run_step(spell, lambda s: pipeline.run_extract(s, models.chat_model()))


@app.task(name="memory_worker.embed", bind=True, base=ModelStep)
def embed(self: ModelStep, spell: Message) -> Message:
    return self.run_step(spell, lambda s: pipeline.run_embed(s, models.embedder()))


@app.task(name="memory_worker.route", bind=True, base=ModelStep)
def route(self: ModelStep, spell: Message) -> Message:
    return self.run_step(spell, lambda s: pipeline.run_route(s, models.chat_model()))


class ToastNotPublished(Exception):
    """The human's channel could not be told; the toast stays undelivered and is retried."""


# A publish that fails after kombu's own retries (task_publish_retry_policy) fails the task,
# which retries later; what still gets lost is found by the sweep (cursors, the outbox).
BROKER_ERRORS = (KombuOperationalError, redis.exceptions.ConnectionError, ToastNotPublished)


@app.task(
    name="memory_worker.commit",
    bind=True,
    autoretry_for=(OperationalError, *BROKER_ERRORS),  # a locked database; a broker away
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=DB_MAX_RETRIES,
)
def commit(self: Task, spell: Message) -> Message:
    """The single writer. A stale view of the open rows sends the spell back to the router."""
    s = Spell.from_json(spell)
    started = time.perf_counter()
    outcome = pipeline.run_commit(s)
    metrics.COMMIT_SECONDS.observe(time.perf_counter() - started)
    if outcome.status == "stale":
        if s.reroutes >= STALE_REROUTES_MAX:
            s.parked = f"open rows kept changing under the router ({s.reroutes} re-routes)"
            outcome = pipeline.run_commit(s)
        else:
            s.reroutes += 1
            log.info("spell %s: open rows changed since routing; routing again", s.key)
            chain(route.s(s.to_json()), commit.s(), notify_toast.s()).apply_async()
            raise Ignore()
    spell_log.finished(s, outcome.status, len(outcome.row_ids))
    return {"spell": s.to_json(), "row_ids": outcome.row_ids, "status": outcome.status}


@app.task(
    name="memory_worker.notify_toast",
    autoretry_for=(OperationalError, *BROKER_ERRORS),
    retry_backoff=True,
    max_retries=DB_MAX_RETRIES,
)
def notify_toast(result: Message) -> int:
    """Deliver the toasts the commit wrote: tell each human's channel (ids only), then mark
    them delivered. Returns how many."""
    return deliver(Spell.from_json(result["spell"]).key)


@app.task(
    name="memory_worker.deliver_toasts",
    autoretry_for=(OperationalError, *BROKER_ERRORS),
    retry_backoff=True,
    max_retries=DB_MAX_RETRIES,
)
def deliver_toasts(spell_key: str) -> int:
    """The sweep's way in: a spell's undelivered toasts, by key."""
    return deliver(spell_key)


def deliver(spell_key: str) -> int:
    waiting = pipeline.pending_toasts(spell_key)
    bus = broker.client(app.conf.broker_url)
    told = [
        n
        for n in waiting
        if toast_bus.publish(
            bus, toast_bus.ToastPosted(n.id, n.user_id, n.persona, n.room_id, n.row_ids)
        )
    ]
    pipeline.mark_delivered(told)
    if len(told) < len(waiting):
        raise ToastNotPublished(f"{len(waiting) - len(told)} toast(s) of {spell_key}")
    return len(told)


def spell_chain(spell: Spell) -> Signature:
    """The five steps for one persona's spell, as one Celery chain."""
    return chain(extract.s(spell.to_json()), embed.s(), route.s(), commit.s(), notify_toast.s())
