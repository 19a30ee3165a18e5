"""The policy every model step shares, as a Celery Task base class (`base=ModelStep`).

One place for what a model step may go through: retries with jittered backoff that honour
the server's retry-after (a call the global quota could not place soon comes back the same
way, as `ratelimit.RateLimited`; the quota itself is taken by `memory_worker.models` as each
call is sent, re-asks included), and parking — a spell whose model kept failing or answered
malformed twice is handed on with `parked` set, so the commit records it where an operator
sees it and leaves the cursor alone. A chain never dies half-way with nothing said. Token
counts ride on the Spell: each step adds its call's usage (`memory_worker.write.pipeline`).

A task body names only its step:

    @app.task(name="memory_worker.extract", bind=True, base=ModelStep)
    def extract(self: ModelStep, spell: dict) -> dict:
        return self.run_step(spell, lambda s: pipeline.run_extract(s, models.chat_model()))
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from memory_worker import broker, inflight, metrics
from memory_worker import settings as settings_mod
from memory_worker.constants import INFLIGHT_RENEW_AFTER_S, MODEL_MAX_RETRIES, RETRY_BACKOFF_MAX_S
from memory_worker.messages import MalformedMessage
from memory_worker.models.base import MalformedAnswer, PermanentModelError, TransientModelError
from memory_worker.rows import Spell
from memory_worker.tasks.boundary import QuietTask, reject

log = logging.getLogger(__name__)


def backoff(retries: int, retry_after: float | None) -> float:
    """Jittered exponential backoff, never sooner than the server asked."""
    base = settings_mod.current().retry_backoff_base_s
    ceiling = min(RETRY_BACKOFF_MAX_S, base * 2**retries)
    wait = random.uniform(ceiling / 2, ceiling)
    return min(RETRY_BACKOFF_MAX_S, max(wait, (retry_after or 0.0) + random.uniform(0, 0.5)))


class ModelStep(QuietTask):
    """A chain step that calls a model: retry, park."""

    abstract = True
    max_retries = MODEL_MAX_RETRIES

    def run_step(self, message: dict[str, Any], step: Callable[[Spell], Spell]) -> dict[str, Any]:
        """Run `step` on the message's spell under the policy; always returns a spell message
        (retrying raises Celery's Retry instead)."""
        try:
            spell = Spell.from_json(message)
        except MalformedMessage as e:
            reject(self.name, e)
        renew_claim(self.app, spell)
        if spell.done:
            return spell.to_json()
        try:
            return step(spell).to_json()
        except TransientModelError as e:  # ratelimit.RateLimited too: the worker slot is freed
            retries = int(self.request.retries)
            if retries >= self.max_retries:
                spell.parked = f"model unavailable after {retries} retries: {e}"
                return spell.to_json()
            retry_after = getattr(e, "retry_after", None)
            log.warning("spell %s: %s; retrying", spell.key, e)
            metrics.RETRIES.labels(self.name).inc()
            raise self.retry(countdown=backoff(retries, retry_after), exc=e) from e
        except MalformedAnswer as e:
            spell.parked = f"malformed model answer (asked twice): {e}"
            return spell.to_json()
        except PermanentModelError as e:
            spell.parked = f"model error: {e}"
            return spell.to_json()


def renew_claim(app: Any, spell: Spell, now: float | None = None) -> None:
    """Keep the spell's in-flight claim (`memory_worker.inflight`) while its chain runs: renewed
    when it was last taken or renewed more than INFLIGHT_RENEW_AFTER_S ago (the spell carries
    when), so a chain of quick steps costs one Redis round trip, not one per step."""
    now = time.time() if now is None else now
    if spell.inflight and now - spell.renewed >= INFLIGHT_RENEW_AFTER_S:
        client = broker.client(app.conf.broker_url)
        inflight.renew(client, spell.persona, spell.room_id, spell.inflight)
        spell.renewed = now
