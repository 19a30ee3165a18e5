"""Room-level tasks: the fan-out on a quiet room, the sweeps, the room's topic vector, and a
renamed human's rows embedded again."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from sqlalchemy import Connection

from memory_worker import models
from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import DB_MAX_RETRIES, SWEEP_WINDOW_S
from memory_worker.core.errors import BrokerFull, MalformedMessage, UnknownRoom
from memory_worker.core.messages import room_id as checked_room_id
from memory_worker.core.messages import user_id as checked_user_id
from memory_worker.ops import broker, inflight
from memory_worker.storage import rooms, store
from memory_worker.storage.outage import is_store_outage
from memory_worker.storage.spell_context import room_members
from memory_worker.tasks.boundary import reject
from memory_worker.tasks.celery_app import app
from memory_worker.tasks.pipeline import BROKER_ERRORS, deliver_toasts, start_spell
from memory_worker.tasks.store_step import StoreStep, left_to_sweep, since_of
from memory_worker.write import reembed, steps
from memory_worker.write.embed import embed_topic, require_store_embedder

log = logging.getLogger(__name__)

RECOVERY_PROMISE_S = 120.0  # docs/running.md: a toast lost to a fault reaches its human within this
LAPSE_MARGIN_S = 1.0  # a room held by a claim is looked at again this long after it lapses


def recovery_bound_s(s: settings_mod.Settings) -> float:
    """Seconds after a fault ends by which the frequent sweep has found all it lost: every
    room a lost chain held started again, every toast a lost commit left handed on. The
    chains' own time (seconds) comes on top.

    The first sweep after the fault that sees a lost room's line (past the grace) starts it,
    or schedules it for the moment its claim lapses: at most grace + every, or the claim's
    lifetime (plus the margin). A toast is the sweep's once it waited past the lag: at most
    lag + every. At the defaults (30 + 30, 60 + 1, 10 + 30) that is 61 s, which leaves the
    chains 59 s of the 120 s promise."""
    return max(
        s.sweep_grace_s + s.sweep_every_s,
        s.inflight_ttl_s + LAPSE_MARGIN_S,
        s.sweep_lag_s + s.sweep_every_s,
    )


@app.task(
    name="memory_worker.on_room_quiet",
    bind=True,
    base=StoreStep,  # the store away: waited out, as a chain step waits
    autoretry_for=BROKER_ERRORS,  # a chain not published: try the room again (idempotent)
    retry_backoff=True,
    retry_kwargs={"max_retries": DB_MAX_RETRIES},
    max_retries=None,  # the store's wait is bounded by time (MW_STORE_OUTAGE_WAIT_S)
)
def on_room_quiet(self: StoreStep, room_id: str, store_since: float = 0.0) -> list[str]:
    """Per persona in the room with new lines, start its chain (unless one is in flight).
    Returns the spell keys."""
    try:
        room_id = checked_room_id(room_id)
        store_since = since_of(store_since)
    except MalformedMessage as e:
        reject("memory_worker.on_room_quiet", e)
    try:
        return start_spells(room_id)
    except BrokerFull as e:  # no claim could be taken for the whole wait
        self.left_to_sweep_full(f"on_room_quiet({room_id!r})", None, e)
    except Exception as e:
        if not is_store_outage(e):
            raise
        self.wait_for_store(room_id, None, e, store_since, what=f"on_room_quiet({room_id!r})")


def start_spells(room_id: str) -> list[str]:
    with store.engine().connect() as conn:
        found = room_members(conn, room_id)
    if found is None:
        log.error("%s", UnknownRoom(room_id))
        return []
    if found.room.incognito:
        return []  # a room that neither reads nor writes: not even a cursor moves
    started = (start_spell(p, room_id, found.humans) for p in found.personas)
    return [key for key in started if key is not None]


def sweep_lagging_rooms(*, recent: bool = False, now: float | None = None) -> list[str]:
    """Enqueue every room whose cursors lag its last line, and every spell whose toasts were
    never delivered; returns the rooms. The queue is not the source of truth, the cursors and
    the outbox are: the beat and `memory-worker sweep` run this.

    `recent`: only lines that waited longer than MW_SWEEP_GRACE_S, written in the last day (cheap,
    on an index: the frequent sweep); else every line (the daily sweep). Recovery takes one sweep
    (docs/design.md §10.1): a room no spell holds is enqueued now, not after a full lag; one still
    held by an in-flight claim — a live chain, or a killed one's until it lapses — is enqueued for
    the moment the claim would lapse (a live chain renews it, and then the fan-out finds it held and
    starts nothing).
    """
    now = time.time() if now is None else now
    s = settings_mod.current()
    window: dict[str, str] = {}
    if recent:
        window = dict(
            written_before=iso(now - s.sweep_grace_s), written_after=iso(now - SWEEP_WINDOW_S)
        )
    with store.engine().connect() as conn:
        lagging = rooms.lagging_rooms(conn, **window)
        claims = {room_id: claims_on(conn, room_id) for room_id in lagging}
    for room_id in lagging:
        free, lapse_s = claims[room_id]
        if free:  # a persona no spell holds: start it now
            on_room_quiet.delay(room_id)
        if lapse_s is not None:  # a persona held: look again when its claim would lapse
            on_room_quiet.apply_async((room_id,), countdown=lapse_s)
    for spell_key in steps.waiting_toasts(iso(now - s.sweep_lag_s)):
        deliver_toasts.delay(spell_key)
    return lagging


def claims_on(conn: Connection, room_id: str) -> tuple[bool, float | None]:
    """(whether some persona of the room holds no in-flight claim, the seconds until the last
    held claim would lapse — a little over — or None when none is held)."""
    found = room_members(conn, room_id)
    personas = found.personas if found is not None else []
    client = broker.client(app.conf.broker_url)
    held = [ms for p in personas if (ms := int(client.pttl(inflight.key(p, room_id)))) > 0]
    lapse = max(held) / 1000 + LAPSE_MARGIN_S if held else None
    return len(held) < len(personas) or not personas, lapse


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


@app.task(name="memory_worker.sweep", autoretry_for=BROKER_ERRORS, retry_backoff=True)
def sweep() -> list[str]:
    """The daily sweep (beat): every lagging room, every undelivered toast."""
    return sweep_unless_away(recent=False)


@app.task(name="memory_worker.sweep_recent", autoretry_for=BROKER_ERRORS, retry_backoff=True)
def sweep_recent() -> list[str]:
    """The frequent sweep (beat, every MW_SWEEP_EVERY_S): recovery in minutes, not a day."""
    return sweep_unless_away(recent=True)


def sweep_unless_away(*, recent: bool) -> list[str]:
    """A sweep; with the store away, none (logged once): the next one finds it all."""
    try:
        return sweep_lagging_rooms(recent=recent)
    except Exception as e:
        if not is_store_outage(e):
            raise
        left_to_sweep("the sweep", e, to="the next one")
        return []


@app.task(
    name="memory_worker.room_topic",
    autoretry_for=(models.TransientModelError,),
    retry_backoff=True,
    max_retries=5,
)
def room_topic(room_id: str) -> bool:
    """Embed the room's topic off the floor, so opening a room never calls a model."""
    try:
        room_id = checked_room_id(room_id)
    except MalformedMessage as e:
        reject("memory_worker.room_topic", e)
    with store.engine().connect() as conn:
        topic = rooms.topic(conn, room_id)
    if not topic:
        return False
    embedder = models.embedder()
    require_store_embedder(embedder)  # another model's vector would mean nothing here
    vector = embed_topic(embedder, topic)
    with store.transaction() as conn:
        rooms.set_topic_embedding(conn, room_id, vector)
    return True


@app.task(
    name="memory_worker.reembed_user",
    autoretry_for=(models.TransientModelError,),
    retry_backoff=True,
    max_retries=5,
)
def reembed_user(user_id: int) -> int:
    """After a rename: embed again the rows that name the human, off the floor. Returns how
    many rows were embedded."""
    try:
        user_id = checked_user_id(user_id)
    except MalformedMessage as e:
        reject("memory_worker.reembed_user", e)
    return reembed.reembed_rows_naming(models.embedder(), user_id)
