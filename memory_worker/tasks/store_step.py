"""The store away is a pause, not a failure: the base of every chain step (`base=StoreStep`).

A database restart, a failover, or another process holding SQLite's write lock makes a step's
reads and writes fail for a while (`storage.outage.is_store_outage` says which errors). The step
is retried by Celery with jittered backoff — each countdown at most STORE_RETRY_MAX_S, so it is
back within seconds of the store's return and far under the broker's visibility timeout
(docs/design.md §14) — for up to MW_STORE_OUTAGE_WAIT_S from the first error it met, its room's
in-flight claim renewed at each try so no second spell starts meanwhile. The first error is one
WARNING naming the wait; the tries after it are INFO lines, never a traceback. Past the wait
the spell is handed to the sweep: one ERROR, and the claim is released at once, so the sweep
can start the room as soon as the store is back, not a claim's lifetime later.

A chain step that fails for any other reason frees its claim too (`on_failure`).

The wait is carried by the task itself (`store_since`, the epoch of the first error it met), as
a keyword of its retry, checked like any field of a message.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, NoReturn

from celery.exceptions import Ignore

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import INFLIGHT_RENEW_AFTER, STORE_RETRY_MAX_S
from memory_worker.core.errors import BrokerFull, MalformedMessage, StoreAway
from memory_worker.core.rows import Spell
from memory_worker.ops import broker, inflight, metrics
from memory_worker.storage.outage import outage_kind, outage_name
from memory_worker.tasks.boundary import QuietTask

log = logging.getLogger(__name__)


def left_to_sweep(what: str, error: BaseException, to: str = "the sweep") -> None:
    """What does not wait for the store (the app's calls, a sweep, a toast's redelivery): one
    WARNING, and the sweep finds the work once the store is back — the cursors and the outbox
    are in the store, so nothing is lost by not waiting."""
    kind = met(error)
    log.warning("%s: the store is %s (%s); left to %s", what, kind, outage_name(error), to)


def met(error: BaseException) -> str:
    """The outage `error` says ("full" or "away"), kept for /healthz and the metrics: a full
    store stays full until a write goes through (`written`)."""
    kind = outage_kind(error) or "away"
    if kind == "full":
        metrics.store_full(True)
    return kind


def written() -> None:
    """A write went through: whatever filled the store, it has room again."""
    metrics.store_full(False)


def store_backoff(waited_s: float) -> float:
    """The countdown to the next try: about as long as the store has been away so far (a short
    blip is tried again in a second, a restart every few), jittered so a room's worth of steps
    do not all knock at once, never over STORE_RETRY_MAX_S."""
    ceiling = min(STORE_RETRY_MAX_S, 1.0 + waited_s)
    return random.uniform(ceiling / 2, ceiling)


def since_of(value: Any) -> float:
    """`store_since` as a retry carries it: an epoch ≥ 0 (0: the store was not away)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise MalformedMessage("store step", "store_since: expected a number ≥ 0")
    return float(value)


class StoreStep(QuietTask):
    """A chain step (or a room's fan-out): waits out the store being away, hands its work to
    the sweep past the wait, and frees a spell's claim when it fails."""

    abstract = True

    def wait_for_store(
        self,
        message: Any,
        spell: Spell | None,
        error: BaseException,
        since: float,
        again: dict[str, Any] | None = None,
        *,
        what: str = "",
    ) -> NoReturn:
        """Retry this task on `message` (with `again` as its keywords) because the store is
        away, or, once it has been away MW_STORE_OUTAGE_WAIT_S, hand the work to the sweep (a
        spell's claim released at once). `what`: the work as a log line names it (default: the
        spell). Never returns."""
        what = what or f"spell {spell.key if spell else '?'}"
        now = time.time()
        waited = now - since if since else 0.0
        limit = settings_mod.current().store_outage_wait_s
        why, kind = outage_name(error), met(error)
        if waited >= limit:
            if spell is not None:
                release_claim(self.app, spell)
            log.error(
                "%s: the store was %s for %.0fs (%s); handed to the sweep%s",
                what,
                kind,
                waited,
                why,
                ", its claim released" if spell is not None else "",
            )
            raise Ignore() from None
        if since:
            log.info(
                "%s: the store is still %s after %.0fs (%s); %s tries again",
                what,
                kind,
                waited,
                why,
                self.name,
            )
        else:
            log.warning(
                "%s: the store is %s (%s); %s waits for it up to %gs",
                what,
                kind,
                why,
                self.name,
                limit,
            )
        if spell is not None:
            renew_claim(self.app, spell, now)  # a retry carries the spell as it arrived
        metrics.RETRIES.labels(self.name).inc()
        kwargs = {**(again or {}), "store_since": since or now}
        raise self.retry(
            args=(message,),
            kwargs=kwargs,
            countdown=store_backoff(waited),
            exc=StoreAway(why),
            max_retries=None,
        ) from None

    def left_to_sweep_full(self, what: str, spell: Spell | None, error: BrokerFull) -> NoReturn:
        """The broker stayed full past MW_BROKER_FULL_WAIT_S (a claim or a quota slot refused
        all along): one WARNING, the spell's claim freed, the work left to the sweep."""
        if spell is not None:
            release_claim(self.app, spell)
        log.warning("%s: %s; left to the sweep", what, error)
        raise Ignore() from None

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        """A step that failed for good ends its chain: free its room's claim at once."""
        try:
            spell = Spell.from_json(args[0])
        except (MalformedMessage, IndexError, KeyError, TypeError, ValueError):
            return
        try:
            release_claim(self.app, spell)
        except Exception:  # the broker away too: the claim lapses on its own
            log.info("spell %s: its claim could not be released; it lapses", spell.key)


def release_claim(app: Any, spell: Spell) -> None:
    """Free the spell's room now, not when its claim would lapse: the one way a sent chain's
    claim is freed (its commit, a step that fails, a spell handed to the sweep). Only while
    the spell's token still holds it (`inflight.release`), so a second call — a retry's —
    frees nothing, least of all a newer spell's claim."""
    client = broker.client(app.conf.broker_url)
    inflight.release(client, spell.persona, spell.room_id, spell.inflight)


def renew_claim(app: Any, spell: Spell, now: float | None = None) -> None:
    """Keep the spell's in-flight claim (`memory_worker.ops.inflight`) while its chain runs, or
    waits for the store: renewed when it was last taken or renewed more than
    INFLIGHT_RENEW_AFTER of its lifetime ago (the spell carries when), so a chain of quick steps
    costs one Redis round trip, not one per step."""
    now = time.time() if now is None else now
    ttl_s = settings_mod.current().inflight_ttl_s
    if spell.inflight and now - spell.renewed >= ttl_s * INFLIGHT_RENEW_AFTER:
        client = broker.client(app.conf.broker_url)
        inflight.renew(client, spell.persona, spell.room_id, spell.inflight, ttl_s)
        spell.renewed = now
