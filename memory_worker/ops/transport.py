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
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from memory_worker.core import settings as settings_mod
from memory_worker.core.settings import EMBEDDED

log = logging.getLogger(__name__)


class Channel(kombu_redis.Channel):
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
        """Publish; a publish that finds the embedded broker gone starts it and goes again
        (a message pushed twice runs twice: every task may)."""
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
