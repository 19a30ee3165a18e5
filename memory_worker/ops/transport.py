"""kombu's Redis transport, made to outlive its broker (celeryconfig's `broker_transport`).

Two changes to kombu 5.7's `kombu.transport.redis`, each at the cause of a worker that died
or a broker nobody started again:

* **A channel is closed once, whatever the broker did.** When the broker dies under a
  consuming worker, Celery's consumer closes the connection twice: `collect()`, then
  `close()`. kombu's close begins by reading the reply of the BRPOP in flight; with the
  server gone that read raises, and the channel is left half-closed — not marked closed,
  its unacked messages not restored. `collect()` then clears the transport's connection
  info (`transport.client = None`). The second close finds the channel still open, goes on
  to restore its unacked messages, builds a Redis pool for that from the cleared info —
  `'NoneType' object has no attribute 'hostname'` in `_connparams`, which no error handler
  expects — and the worker exits (`CRITICAL Unrecoverable error`). Only a worker holding
  unacked messages (a task running under acks_late, a retry waiting out its countdown)
  reaches that restore: busy workers died, idle ones did not. Here a reply lost with the
  broker ends the read, not the close: the channel is closed in the first pass (its pools
  dropped, its unacked messages put back if the server answers again, else left in Redis's
  unacked set for the visibility timeout), so the second close does nothing. The same goes
  for any other step of a close that meets the dead connection (an auto-delete fanout
  queue's unbinding: Celery's "Error on restarting Gossip"), and a channel asked for a pool
  after its connection was closed gets a connection error — which every caller of a close
  ignores — not an AttributeError.
* **The embedded broker comes back by itself.** A connection that finds the embedded Redis
  gone — a worker's reconnect loop, a publish (the app's `room_quiet`, a chain's next step,
  beat's sweep), a closing channel about to put its unacked messages back — starts it again
  on its kept address (`embedded.ensure_running`: one server, under a file lock, however
  many processes find it gone at once) and goes on, as a newly started worker would. With a
  configured broker URL nothing is started: that Redis is the deployer's.
* **A broker at its memory limit is a pause.** Redis with `maxmemory` and `noeviction`
  refuses every write that could grow it ("OOM command not allowed") — and every
  command inside a MULTI, deletions too. kombu records a message it takes off a queue (BRPOP,
  which is never refused) in the `unacked` set, acks and hands back through MULTI blocks: an
  ack raised, the worker logged "CRITICAL Unrecoverable error" and exited, and a message taken
  whose record was refused was in neither place. Here each move of a message — recorded as
  taken, acked, handed back — is one Lua script whose first write frees memory (a deletion),
  so Redis lets the writes after it through: a script cannot be stopped half-way once it has
  written, and a move needs no more memory than the message it moves already held
  (`_MOVE`, `_RECORD`). A publish — a new message, the one thing that grows the broker — waits
  for memory with back-off (`broker.wait_while_full`, up to MW_BROKER_FULL_WAIT_S, one
  WARNING), then is left to the sweep with one WARNING: the cursors and the outbox say what
  its message would have started. A worker's reply to a ping is not waited for. The rest of
  what kombu writes is made to pass or wait too: a queue's length read and an expiring
  queue's PEXPIREs and an auto-delete queue's deletion go outside a MULTI (a full broker
  allows each alone); the hourly refresh of an expiring queue's binding (a worker's
  remote-control mailbox) is skipped until there is room. Broadcasts — events, heartbeats,
  pings — are PUBLISHes, which a full broker never refuses.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import QUEUES
from memory_worker.core.errors import BrokerFull
from memory_worker.core.settings import EMBEDDED
from memory_worker.ops import broker

log = logging.getLogger(__name__)


# A message taken off its queue, recorded as unacked. The first write, a ZREM of a tag not yet
# there, changes nothing but tells Redis the script has written: it lets the writes after it
# through a broker at its memory limit (a script is never stopped half-way), and the record
# needs no more than the list entry BRPOP just freed. KEYS: index, unacked. ARGV: tag, time,
# record.
_RECORD = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""

# An unacked message handed back: off the unacked set (the first write, a deletion: what
# follows goes through at the memory limit), onto its queues; nothing pushed unless this call
# took it off (another worker's restore may have been first). KEYS: index, unacked, then each
# queue. ARGV: tag, 1 to push at the head, then each queue's payload.
_MOVE = """
local had = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if had == 0 then return 0 end
local push = ARGV[2] == '1' and 'LPUSH' or 'RPUSH'
for i = 3, #KEYS do redis.call(push, KEYS[i], ARGV[i]) end
return 1
"""


class _Pushes:
    """What kombu's `_do_restore_message` would push, collected for `_MOVE` instead."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.bodies: list[str] = []

    def lpush(self, key: str, body: str) -> None:
        self.keys.append(key)
        self.bodies.append(body)

    rpush = lpush


class _NoMulti:
    """A Redis client whose pipelines send no MULTI: a full broker refuses every command
    inside one, deletions too, and lets the same deletions through one by one."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def pipeline(self, transaction: bool = False, shard_hint: Any = None) -> Any:
        return self._client.pipeline(transaction=False, shard_hint=shard_hint)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class QoS(kombu_redis.QoS):
    """kombu's ack emulation, each move of a message one script that a full broker lets
    through (see `_RECORD`, `_MOVE`)."""

    def append(self, message: Any, delivery_tag: Any) -> None:
        info = message.delivery_info
        record = dumps([message._raw, info["exchange"], info["routing_key"]])
        with self.channel.conn_or_acquire() as client:
            client.register_script(_RECORD)(
                keys=[self.unacked_index_key, self.unacked_key],
                args=[delivery_tag, time.time(), record],
            )
        virtual.QoS.append(self, message, delivery_tag)

    def _remove_from_indices(self, delivery_tag: Any, pipe: Any = None) -> Any:
        """An ack or a drop: two deletions, which a full broker allows — but not in a MULTI."""
        if pipe is not None:
            return super()._remove_from_indices(delivery_tag, pipe)
        with self.channel.conn_or_acquire() as client:
            plain = client.pipeline(transaction=False)
        return plain.zrem(self.unacked_index_key, delivery_tag).hdel(self.unacked_key, delivery_tag)

    def restore_by_tag(self, tag: Any, client: Any = None, leftmost: bool = False) -> None:
        with self.channel.conn_or_acquire(client) as client:
            raw = client.hget(self.unacked_key, tag)
            pushes = _Pushes()
            if raw:
                payload, exchange, routing_key = loads(bytes_to_str(raw))
                self.channel._do_restore_message(payload, exchange, routing_key, pushes)
            client.register_script(_MOVE)(
                keys=[self.unacked_index_key, self.unacked_key, *pushes.keys],
                args=[tag, "1" if leftmost else "0", *pushes.bodies],
            )

    def restore_visible(self, start: int = 0, num: int = 10, interval: int = 10) -> None:
        """kombu's periodic hand-back of messages past the visibility timeout takes a lock
        (SET NX): a full broker refuses it, and the next round comes in seconds."""
        try:
            super().restore_visible(start=start, num=num, interval=interval)
        except redis.ResponseError as e:
            if not broker.is_full(e):
                raise
            log.debug("unacked messages not looked at: the broker is full")


class Channel(kombu_redis.Channel):
    QoS = QoS

    def close(self) -> None:
        try:
            super().close()
        except self.connection_errors:
            self._finish_close()

    def _finish_close(self) -> None:
        """What kombu's close left undone when a step of it met the dead connection."""
        self._in_poll = self._in_listen = False
        if self.connection is not None and self.connection.cycle is not None:
            self.connection.cycle.discard(self)
        self._disconnect_pools()
        self._close_clients()
        try:  # marks it closed first; puts the unacked messages back if the server answers
            virtual.Channel.close(self)
        except self.connection_errors:
            pass  # they stay in Redis's unacked set until the visibility timeout

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        if self._left_behind("ack", delivery_tag):
            return
        try:
            super().basic_ack(delivery_tag, multiple=multiple)
        except self.connection_errors:  # the broker died as the task finished, before the close
            self._say_left_behind("ack", delivery_tag)

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        if self._left_behind("reject", delivery_tag):
            return
        try:
            super().basic_reject(delivery_tag, requeue=requeue)
        except self.connection_errors:
            self._say_left_behind("reject", delivery_tag)

    def _left_behind(self, what: str, delivery_tag: Any) -> bool:
        """A task that finished after its channel closed with the broker cannot settle its
        message (kombu logs that CRITICAL, "Couldn't ack"). Its message is not lost: the close
        put it back in the queue, or it waits in Redis's unacked set for the visibility
        timeout; either way the task runs again, as any task may (acks late)."""
        if not self.closed:
            return False
        self._say_left_behind(what, delivery_tag)
        return True

    def _say_left_behind(self, what: str, delivery_tag: Any) -> None:
        log.warning(
            "%s of message %s skipped: its broker connection was lost while the task ran; "
            "the message was handed back and the task will run again",
            what,
            delivery_tag,
        )

    def _brpop_read(self, **options: Any) -> Any:
        """kombu's read of a BRPOP reply; at a close, a broker gone has none to give."""
        try:
            return super()._brpop_read(**options)
        except self.connection_errors:
            if not self._closing:
                raise
            revive_embedded(self.connection.client)  # the close then puts messages back
            raise virtual.Empty() from None

    def _put(self, queue: str, message: Any, **kwargs: Any) -> Any:
        """Publish, waiting out a full broker (see the module's doc); a publish that finds the
        embedded broker gone starts it and goes again (a message pushed twice runs twice: every
        task may)."""
        if queue not in QUEUES:  # a reply to a ping: not worth a worker's wait
            try:
                return self._put_once(queue, message, **kwargs)
            except redis.ResponseError as e:
                if not broker.is_full(e):
                    raise
                log.info("a reply on %s not sent: the broker is full", queue)
                return None
        try:
            return broker.wait_while_full(lambda: self._put_once(queue, message, **kwargs))
        except BrokerFull as e:
            if broker.is_impatient():  # the app's call: it says so itself
                raise
            log.warning("a message for the %s queue not published: %s; left to the sweep", queue, e)
            return None

    def _size(self, queue: str) -> int:
        """A queue's length (a publish declares its queue and reads it): reads, which a full
        broker answers — but not inside a MULTI, kombu's way."""
        return sum(self._per_priority(queue, "llen"))

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return any(self._per_priority(queue, "exists"))

    def _per_priority(self, queue: str, command: str, *args: Any) -> list[int]:
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for pri in self.priority_steps:
                getattr(pipe, command)(self._q_for_pri(queue, pri), *args)
            return [int(n) for n in pipe.execute()]

    def _maybe_update_queues_expire(self, client: Any, queue: str) -> None:
        """An expiring queue's keys given their time again as it is read (a ping's reply
        queue): PEXPIREs, which a full broker allows — but not in a MULTI, kombu's way."""
        if queue in self._expires:
            self._per_priority(queue, "pexpire", self._expires[queue])

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        """A queue deleted (an auto-delete queue at a channel's close: a worker's mailbox, an
        events receiver's): deletions, which a full broker allows — but not in a MULTI."""
        kwargs["client"] = _NoMulti(kwargs.get("client") or self._create_client())
        super()._delete(queue, *args, **kwargs)

    def maybe_refresh_binding_expiry(self) -> None:
        """kombu's periodic refresh of the bindings of expiring queues (each worker's
        remote-control mailbox, an events receiver's queue) runs scripts in a MULTI, which a
        full broker refuses whole — kombu logged that as a WARNING with a traceback. Skipped
        while the broker is full: it is tried again each second until it goes through (the
        binding lives an hour; a table swept meanwhile is written again by the refresh)."""
        try:
            super().maybe_refresh_binding_expiry()
        except redis.ResponseError as e:
            if not broker.is_full(e):
                raise
            log.debug("the bindings of expiring queues not refreshed: the broker is full")

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """A queue declared again as a publish begins (a fresh producer's first message to
        it): a binding already there needs no write, which a full broker would refuse; a new
        one waits for memory as a publish does."""
        if exchange and self.typeof(exchange).type != "fanout" and queue not in self._expires:
            member = self.sep.join([routing_key or "", pattern or "", queue or ""])
            with self.conn_or_acquire() as client:
                if client.sismember(self.keyprefix_queue % (exchange,), member):
                    return
        broker.wait_while_full(
            lambda: super(Channel, self)._queue_bind(exchange, routing_key, pattern, queue)
        )

    def _put_once(self, queue: str, message: Any, **kwargs: Any) -> Any:
        try:
            return super()._put(queue, message, **dict(kwargs))
        except self.connection_errors:
            if not revive_embedded(self.connection.client):
                raise
            return super()._put(queue, message, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("this broker connection was closed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel

    def establish_connection(self) -> Any:
        try:
            return super().establish_connection()
        except self.connection_errors:
            if not revive_embedded(self.client):
                raise
            return super().establish_connection()


def revive_embedded(conninfo: Any) -> bool:
    """Start the embedded Redis again when this process uses it, `conninfo` (a kombu
    Connection) points at it and it is down. True when it was (re)started or already up.
    Never raises: a broker that cannot be started is logged, and the caller's own retries
    go on."""
    s = settings_mod.current()
    if s.broker_url != EMBEDDED or conninfo is None:
        return False
    from memory_worker.ops import embedded  # only here: a configured Redis needs none of it

    if embedded.kept_port(s.state_dir) != conninfo.port:
        return False
    try:
        embedded.ensure_running(s.state_dir, own=True)
    except Exception as e:  # noqa: BLE001 - a port taken, a binary gone: logged, retried
        log.warning("the embedded broker could not be started again: %s", e)
        return False
    return True
