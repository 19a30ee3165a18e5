"""The policy every model step shares, as a Celery Task base class (`base=ModelStep`).

One place for what a model step may go through:

* Faults (429/5xx/timeouts, and an answer still malformed after its re-ask): retried with
  jittered backoff that honours the server's retry-after, MODEL_MAX_RETRIES times, then the
  spell is handed on with `parked` set, so the commit records it where an operator sees it
  and leaves the cursor alone. A chain never dies half-way with nothing said.
* The store away (a database restart, "database is locked"): waited out, then handed to the
  sweep — the `StoreStep` base's business (`memory_worker.tasks.store_step`).
* Waiting for the quota (`RateLimited`) is back-pressure, not a fault: the task
  comes back when its reserved slot is near (`RateLimited.countdown`), presents that ticket
  (`ratelimit.holding`), and is never parked for it however long the backlog. The faults are
  counted by the task itself (the `faults` keyword it retries with), since Celery's one
  `retries` counter counts both; Celery's own limit is off (`max_retries = None`).

Token counts ride on the Spell: each step adds its call's usage (`memory_worker.write.steps`).
A task body names only its step:

    @app.task(name="memory_worker.extract", bind=True, base=ModelStep)
    def extract(self: ModelStep, spell: dict, faults: int = 0, slot: int = 0,
                store_since: float = 0.0) -> dict:
        return self.run_step(spell, lambda s: steps.run_extract(s, ...), faults, slot,
                             store_since)
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import (
    MODEL_MAX_RETRIES,
    RETRY_BACKOFF_MAX_S,
)
from memory_worker.core.errors import (
    BrokerFull,
    MalformedAnswer,
    MalformedMessage,
    PermanentModelError,
    RateLimited,
    TransientModelError,
)
from memory_worker.core.rows import Spell
from memory_worker.ops import metrics, ratelimit
from memory_worker.storage.outage import is_store_outage
from memory_worker.tasks.boundary import reject
from memory_worker.tasks.store_step import StoreStep, renew_claim, since_of

log = logging.getLogger(__name__)


def backoff(retries: int, retry_after: float | None) -> float:
    """Jittered exponential backoff, never sooner than the server asked."""
    base = settings_mod.current().retry_backoff_base_s
    ceiling = min(RETRY_BACKOFF_MAX_S, base * 2**retries)
    wait = random.uniform(ceiling / 2, ceiling)
    return min(RETRY_BACKOFF_MAX_S, max(wait, (retry_after or 0.0) + random.uniform(0, 0.5)))


class ModelStep(StoreStep):
    """A chain step that calls a model: wait for the quota, retry faults, park; wait out the
    store."""

    abstract = True
    max_retries = None  # quota waits are unbounded; faults are bounded by `run_step`

    def run_step(
        self,
        message: dict[str, Any],
        step: Callable[[Spell], Spell],
        faults: int = 0,
        slot: int = 0,
        store_since: float = 0.0,
    ) -> dict[str, Any]:
        """Run `step` on the message's spell under the policy; always returns a spell message
        (retrying raises Celery's Retry instead). `faults`: retries spent on model faults so
        far; `slot`: the quota ticket this task kept when it was deferred (0: none);
        `store_since`: when the store went away under this step (0: it did not)."""
        try:
            spell = Spell.from_json(message)
            faults, slot = _count("faults", faults), _count("slot", slot)
            store_since = since_of(store_since)
        except MalformedMessage as e:
            reject(self.name, e)
        renew_claim(self.app, spell)
        if spell.done:
            return spell.to_json()
        try:
            with ratelimit.holding(slot):
                return step(spell).to_json()
        except RateLimited as e:
            log.info("spell %s: waiting for the model quota (%.1fs)", spell.key, e.retry_after)
            again = {"faults": faults, "slot": e.slot_ms}
            raise self.retry(args=(message,), kwargs=again, countdown=e.countdown(), exc=e) from e
        except (TransientModelError, MalformedAnswer) as e:
            if faults >= MODEL_MAX_RETRIES:
                what = "malformed model answer" if isinstance(e, MalformedAnswer) else "model"
                spell.parked = f"{what} unavailable after {faults} retries: {e}"
                return spell.to_json()
            retry_after = getattr(e, "retry_after", None)
            log.warning("spell %s: %s; retrying", spell.key, e)
            metrics.RETRIES.labels(self.name).inc()
            again = {"faults": faults + 1, "slot": 0}
            wait = backoff(faults, retry_after)
            raise self.retry(args=(message,), kwargs=again, countdown=wait, exc=e) from e
        except PermanentModelError as e:
            spell.parked = f"model error: {e}"
            return spell.to_json()
        except BrokerFull as e:  # no quota slot could be taken for the whole wait
            self.left_to_sweep_full(f"spell {spell.key}", spell, e)
        except Exception as e:
            if not is_store_outage(e):
                raise
            self.wait_for_store(message, spell, e, store_since, {"faults": faults, "slot": 0})


def _count(name: str, value: Any) -> int:
    """A retry's own bookkeeping, checked like any field of a message."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedMessage("model step", f"{name}: expected a whole number ≥ 0")
    return value
