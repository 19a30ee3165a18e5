"""The chain's tasks: extract → embed → route → commit, which also tells the spell's toasts.

Each is a thin shell over `memory_worker.write.steps`: the JSON message in (checked at the
boundary, `memory_worker.tasks.boundary`), the step, the JSON message out. What a model fault
means (retry, park) is the `ModelStep` base class's business (`memory_worker.tasks.model_step`);
the store away (a restart, "database is locked") is waited out by every step, the commit too
(`memory_worker.tasks.store_step`); the commit also retries a broker away.

The commit is one task of four jobs in order (`commit_steps`): record the spell, tell the
room's toasts, free the room's claim, begin its next window. The toast is told by the commit
itself, right after its transaction, and retried with it as one task: a delivery is never a
message of its own that a killed worker or a wiped broker can lose between the commit and the
human (such a toast once waited 309–350 s for the sweep). Whichever comes first delivers it:
the commit's own run or retry, the next spell's commit in the same room (which delivers
whatever the room's earlier spells left), or the sweep, once it waited past MW_SWEEP_LAG_S.

One spell, one run: `start_spell` claims the persona's key for the room
(`memory_worker.ops.inflight`) before it sends a chain, and the commit frees it
(`store_step.release_claim`; a step that fails for good frees it too). A backlog drains
window by window: a commit that moved the cursor starts the next spell at once, so lines that
arrived while the key was held (their quiet event found it taken) are never left behind.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import redis
from celery import chain
from celery.canvas import Signature
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError as KombuOperationalError

from memory_worker import models
from memory_worker.core import messages
from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import DB_MAX_RETRIES, STALE_REROUTES_MAX
from memory_worker.core.errors import BrokerFull, MalformedMessage, ToastNotPublished
from memory_worker.core.rows import Spell
from memory_worker.ops import broker, inflight, metrics, spell_log
from memory_worker.storage.outage import is_store_outage
from memory_worker.tasks import delivery
from memory_worker.tasks.boundary import reject
from memory_worker.tasks.celery_app import app
from memory_worker.tasks.model_step import ModelStep
from memory_worker.tasks.store_step import StoreStep, release_claim, since_of, written
from memory_worker.write import steps
from memory_worker.write.commit import Outcome

log = logging.getLogger(__name__)
Message = dict[str, Any]


def model_step(name: str, run: Callable[[Spell], Spell]) -> Any:
    """The task `memory_worker.<name>`: a spell message in, `run` on its spell under the
    `ModelStep` policy (retries, the quota, parking), the next spell message out."""

    @app.task(name=f"memory_worker.{name}", bind=True, base=ModelStep)
    def step(
        self: ModelStep, spell: Message, faults: int = 0, slot: int = 0, store_since: float = 0.0
    ) -> Message:
        return self.run_step(spell, run, faults, slot, store_since)

    return step


extract = model_step("extract", lambda s: steps.run_extract(s, models.chat_model()))
embed = model_step("embed", lambda s: steps.run_embed(s, models.embedder()))
route = model_step("route", lambda s: steps.run_route(s, models.chat_model()))


# A publish that fails after kombu's own retries (task_publish_retry_policy) fails the task,
# which retries later; what still gets lost is found by the sweep (cursors, the outbox).
BROKER_ERRORS = (KombuOperationalError, redis.exceptions.ConnectionError, ToastNotPublished)


@app.task(
    name="memory_worker.commit",
    bind=True,
    base=StoreStep,
    autoretry_for=BROKER_ERRORS,  # a broker away; the store away is `StoreStep`'s
    retry_backoff=True,
    retry_backoff_max=60,
    retry_kwargs={"max_retries": DB_MAX_RETRIES},
    max_retries=None,  # the store's wait is bounded by time (MW_STORE_OUTAGE_WAIT_S)
)
def commit(self: StoreStep, spell: Message, store_since: float = 0.0) -> Message:
    """The single writer, the chain's last step (`commit_steps`)."""
    try:
        s = Spell.from_json(spell)
        store_since = since_of(store_since)
    except MalformedMessage as e:
        reject(self.name, e)
    try:
        return commit_steps(s)
    except BrokerFull as e:  # the room's next spell could not be claimed for the whole wait
        self.left_to_sweep_full(f"spell {s.key}", s, e)
    except Exception as e:
        if not is_store_outage(e):
            raise
        self.wait_for_store(spell, s, e, store_since)


def commit_steps(s: Spell) -> Message:
    """The commit task's four jobs, in order, each a function of its own. A run that ends
    early ends the task (Ignore): a spell routed on a stale view goes back to the router with
    its claim; a foreign one is dropped, its claim freed. A toast not told retries the whole
    task, which finds the spell recorded and tells it (a retry's release frees nothing)."""
    outcome = record(s)  # 1. the transaction
    if outcome.status == "stale":
        reroute(s)  # back to the router, the claim kept: ends here
    if outcome.status == "foreign":
        drop_foreign(s)  # not a spell of this store: its claim freed, ends here
    untold = delivery.deliver_room(s)  # 2. the room's toasts told
    release_claim(app, s)  # 3. the room freed
    begin_next(s, outcome)  # 4. its next window begun
    if untold:
        raise ToastNotPublished(f"{untold} toast(s) of {s.persona}/{s.room_id}")
    return settled(s, outcome)


def record(s: Spell) -> Outcome:
    """The commit's transaction (`steps.run_commit`), timed; a spell whose open rows kept
    changing under the router (STALE_REROUTES_MAX re-routes) is recorded parked instead. Each
    outcome but 'stale' and 'foreign' ends the spell: its one log line."""
    started = time.perf_counter()
    outcome = steps.run_commit(s)
    written()
    metrics.COMMIT_SECONDS.observe(time.perf_counter() - started)
    if outcome.status == "stale" and s.reroutes >= STALE_REROUTES_MAX:
        s.parked = f"open rows kept changing under the router ({s.reroutes} re-routes)"
        outcome = steps.run_commit(s)
    if outcome.status not in ("stale", "foreign"):
        spell_log.finished(s, outcome.status, len(outcome.row_ids))
    return outcome


def reroute(s: Spell) -> NoReturn:
    """A stale view of the open rows: route the spell again and commit that, its claim kept."""
    s.reroutes += 1
    log.info("spell %s: open rows changed since routing; routing again", s.key)
    chain(route.s(s.to_json()), commit.s()).apply_async()
    raise Ignore()


def drop_foreign(s: Spell) -> NoReturn:
    """A spell whose last line is not a line of its room in this store: nothing recorded, the
    room's cursor unmoved, its claim freed."""
    log.warning(
        "spell %s: its last line is not a line of its room in this store (a message that "
        "outlived its store, or a line deleted since); dropped, the room's cursor unmoved",
        s.key,
    )
    release_claim(app, s)
    raise Ignore()


def begin_next(s: Spell, outcome: Outcome) -> None:
    """A commit that moved the cursor with lines after it (a backlog's next window, or lines
    said while the claim was held: their quiet event found it taken) begins the room's next
    spell at once."""
    if outcome.status in ("committed", "skipped") and steps.has_lines_after(s):
        start_spell(s.persona, s.room_id, s.witnessed)


def settled(s: Spell, outcome: Outcome) -> Message:
    """The task's result, which shows in its events: what was said and decided goes no
    further."""
    spell = dataclasses.replace(s, candidates=[], decisions=[])
    return {"spell": spell.to_json(), "row_ids": outcome.row_ids, "status": outcome.status}


@app.task(
    name="memory_worker.deliver_toasts",
    autoretry_for=BROKER_ERRORS,
    retry_backoff=True,
    max_retries=DB_MAX_RETRIES,
)
def deliver_toasts(spell_key: str) -> int:
    """The sweep's way in: a spell's undelivered toasts, by key (`delivery.deliver_spell`)."""
    try:
        spell_key = messages.spell_key(spell_key)
    except MalformedMessage as e:
        reject("memory_worker.deliver_toasts", e)
    return delivery.deliver_spell(spell_key)


def spell_chain(spell: Spell) -> Signature:
    """The four steps for one persona's spell, as one Celery chain (the commit delivers the
    toasts itself: `commit_steps`)."""
    return chain(extract.s(spell.to_json()), embed.s(), route.s(), commit.s())


def start_spell(persona: str, room_id: str, members: Sequence[int] = ()) -> str | None:
    """Begin the persona's next spell in the room and send its chain — unless one is already
    in flight there, or there is nothing new. Returns the spell's key when one started.
    `members`: the room's humans as the caller last saw them (saves a read when still so)."""
    client = broker.client(app.conf.broker_url)
    token = inflight.claim(client, persona, room_id, settings_mod.current().inflight_ttl_s)
    if token is None:
        log.info("%s/%s: a spell is in flight; not starting another", persona, room_id)
        return None
    try:
        spell = steps.begin(persona, room_id, members)
        if spell is not None:
            spell.inflight, spell.renewed = token, time.time()
            spell_chain(spell).apply_async()
            return spell.key
    except BaseException:
        inflight.release(client, persona, room_id, token)
        raise
    inflight.release(client, persona, room_id, token)
    return None
