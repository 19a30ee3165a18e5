"""The chain's tasks: extract → embed → route → commit → notify_toast.

Each is a thin shell over `memory_worker.write.pipeline`: it turns the JSON message into a
Spell, calls the step, and decides what a fault means. 429/5xx/timeouts retry with backoff
and jitter, honouring the server's retry-after; a malformed answer (already re-asked once) or
retries run out park the spell — it still travels to the commit, which records it where an
operator sees it and leaves the cursor alone. A chain never dies half-way with nothing said.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from celery import Task, chain
from celery.exceptions import Ignore
from sqlalchemy.exc import OperationalError

from memory_worker import broker, models, ratelimit
from memory_worker import settings as settings_mod
from memory_worker.celery_app import app
from memory_worker.constants import (
    MODEL_MAX_RETRIES,
    RETRY_BACKOFF_MAX_S,
    STALE_REROUTES_MAX,
)
from memory_worker.models.base import MalformedAnswer, PermanentModelError, TransientModelError
from memory_worker.rows import Spell
from memory_worker.write import pipeline

log = logging.getLogger(__name__)


def backoff(retries: int, retry_after: float | None) -> float:
    """Jittered exponential backoff, never sooner than the server asked."""
    base = settings_mod.current().retry_backoff_base_s
    ceiling = min(RETRY_BACKOFF_MAX_S, base * 2**retries)
    wait = random.uniform(ceiling / 2, ceiling)
    return min(RETRY_BACKOFF_MAX_S, max(wait, (retry_after or 0.0) + random.uniform(0, 0.5)))


def _model_step(task: Task, message: dict, step: Callable[[Spell], Spell]) -> dict:
    spell = Spell.from_json(message)
    if spell.done:
        return spell.to_json()
    try:
        s = settings_mod.current()
        ratelimit.acquire(broker.client(app.conf.broker_url), "model", s.model_calls_per_second)
        return step(spell).to_json()
    except (TransientModelError, ratelimit.RateLimited) as e:
        if task.request.retries >= task.max_retries:
            spell.parked = f"model unavailable after {task.request.retries} retries: {e}"
            return spell.to_json()
        retry_after = getattr(e, "retry_after", None)
        log.warning("spell %s: %s; retrying", spell.key, e)
        raise task.retry(countdown=backoff(task.request.retries, retry_after), exc=e) from e
    except MalformedAnswer as e:
        spell.parked = f"malformed model answer (asked twice): {e}"
        return spell.to_json()
    except PermanentModelError as e:
        spell.parked = f"model error: {e}"
        return spell.to_json()


@app.task(name="memory_worker.extract", bind=True, max_retries=MODEL_MAX_RETRIES)
def extract(self: Task, spell: dict) -> dict:
    return _model_step(self, spell, lambda s: pipeline.run_extract(s, models.chat_model()))


@app.task(name="memory_worker.embed", bind=True, max_retries=MODEL_MAX_RETRIES)
def embed(self: Task, spell: dict) -> dict:
    return _model_step(self, spell, lambda s: pipeline.run_embed(s, models.embedder()))


@app.task(name="memory_worker.route", bind=True, max_retries=MODEL_MAX_RETRIES)
def route(self: Task, spell: dict) -> dict:
    return _model_step(self, spell, lambda s: pipeline.run_route(s, models.chat_model()))


@app.task(
    name="memory_worker.commit",
    bind=True,
    autoretry_for=(OperationalError,),  # "database is locked" past the busy timeout
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=MODEL_MAX_RETRIES,
)
def commit(self: Task, spell: dict) -> dict:
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
    max_retries=MODEL_MAX_RETRIES,
)
def notify_toast(result: dict) -> int:
    toasts = pipeline.run_notify(Spell.from_json(result["spell"]), result["row_ids"])
    return len(toasts)


def spell_chain(spell: Spell):  # type: ignore[no-untyped-def]
    """The five steps for one persona's spell, as one Celery chain."""
    return chain(extract.s(spell.to_json()), embed.s(), route.s(), commit.s(), notify_toast.s())
