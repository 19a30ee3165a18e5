"""The chain's tasks: extract → embed → route → commit → notify_toast.

Each is a thin shell over `memory_worker.write.pipeline`: the JSON message in, the step, the
JSON message out. What a model fault means (retry, park) is the `ModelStep` base class's
business (`memory_worker.tasks.model_step`); the commit and the toast retry only a locked
database.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, chain
from celery.canvas import Signature
from celery.exceptions import Ignore
from sqlalchemy.exc import OperationalError

from memory_worker import broker, models, toast_bus
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


@app.task(
    name="memory_worker.commit",
    bind=True,
    autoretry_for=(OperationalError,),  # "database is locked" past the busy timeout
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=DB_MAX_RETRIES,
)
def commit(self: Task, spell: Message) -> Message:
    """The single writer. A stale view of the open rows sends the spell back to the router."""
    s = Spell.from_json(spell)
    outcome = pipeline.run_commit(s)
    if outcome.status == "stale":
        if s.reroutes >= STALE_REROUTES_MAX:
            s.parked = f"open rows kept changing under the router ({s.reroutes} re-routes)"
            outcome = pipeline.run_commit(s)
        else:
            s.reroutes += 1
            log.info("spell %s: open rows changed since routing; routing again", s.key)
            chain(route.s(s.to_json()), commit.s(), notify_toast.s()).apply_async()
            raise Ignore()
    log.info("spell %s: %s, rows %s", s.key, outcome.status, outcome.row_ids)
    return {"spell": s.to_json(), "row_ids": outcome.row_ids, "status": outcome.status}


@app.task(
    name="memory_worker.notify_toast",
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=DB_MAX_RETRIES,
)
def notify_toast(result: Message) -> int:
    """Store the toasts, then tell each human's channel (ids only) so an app can push them."""
    spell = Spell.from_json(result["spell"])
    toasts = pipeline.run_notify(spell, result["row_ids"])
    bus = broker.client(app.conf.broker_url)
    for toast in toasts:
        if toast.notice_id is None:  # run_notify returns stored toasts only
            continue
        posted = toast_bus.ToastPosted(
            toast.notice_id, toast.user_id, spell.persona, spell.room_id, toast.row_ids
        )
        toast_bus.publish(bus, posted)
    return len(toasts)


def spell_chain(spell: Spell) -> Signature:
    """The five steps for one persona's spell, as one Celery chain."""
    return chain(extract.s(spell.to_json()), embed.s(), route.s(), commit.s(), notify_toast.s())
