"""Which Redis the project uses: the configured URL, or the embedded one (started on demand).

Also the small Redis client the tasks use for the in-flight claims and the global model-call
rate limit, and what a broker at its memory limit means (`is_full`, `wait_while_full`).

A broker at its memory limit is an outage, not a failure. Redis with `maxmemory` and the
`noeviction` policy (the one a Celery broker needs: an evicting policy drops queued tasks)
refuses every write that could grow its memory — a publish, a claim — with "OOM command not
allowed", while reads and deletions go on, so workers keep taking and finishing tasks and free
memory as they ack. Each refused write waits with back-off (`wait_while_full`), up to
MW_BROKER_FULL_WAIT_S, as a lost connection is waited for; one WARNING per process and outage.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

import redis
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from memory_worker.core import settings as settings_mod
from memory_worker.core.errors import BrokerFull
from memory_worker.core.settings import EMBEDDED
from memory_worker.ops.embedded import ensure_running

log = logging.getLogger(__name__)
T = TypeVar("T")

_OOM = "command not allowed when used memory"  # Redis's OOM reply, bare or inside a script's
EVICTING = ("allkeys-", "volatile-")  # maxmemory-policy prefixes that drop keys: queued tasks


def url() -> str:
    """The broker URL in force; with none set, the embedded Redis, started (and owned by this
    process) if it is not running. Called when a process first sends or consumes, never at
    import."""
    s = settings_mod.current()
    if s.broker_url == EMBEDDED:
        return ensure_running(s.state_dir, own=True)
    return s.broker_url


class PatientRedis(redis.Redis):
    """A Redis client whose every command waits out a full broker (`wait_while_full`): a
    claim, a quota slot, a pause. Past the wait the command raises BrokerFull."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        send = super().execute_command
        return wait_while_full(lambda: send(*args, **options))  # type: ignore[no-untyped-call]


@lru_cache(maxsize=4)
def _client(broker_url: str, pid: int) -> redis.Redis:
    return PatientRedis.from_url(broker_url)


def client(broker_url: str) -> redis.Redis:
    """A Redis client for `broker_url`, one per process (never shared across a fork)."""
    return _client(broker_url, os.getpid())


def is_full(error: BaseException) -> bool:
    """Whether `error` is Redis refusing a write for memory (maxmemory reached): an
    OutOfMemoryError, or a script's error that carries the same reply."""
    return isinstance(error, redis.ResponseError) and _OOM in str(error)


class _Outage:
    """This process's view of a full broker: said once per outage. At its limit a broker's
    memory hovers — each ack frees a little, the next publish takes it — so an outage ends
    only when no write was refused for SAME_OUTAGE_S."""

    SAME_OUTAGE_S = 60.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = -self.SAME_OUTAGE_S  # monotonic seconds of the last refusal

    def refused(self, wait_s: float) -> None:
        now = time.monotonic()
        with self.lock:
            first, self.last = now - self.last >= self.SAME_OUTAGE_S, now
        if first:
            log.warning(
                "the broker is full (Redis at its maxmemory refuses writes); publishes and "
                "claims wait for memory up to %gs (MW_BROKER_FULL_WAIT_S): free memory or "
                "raise maxmemory",
                wait_s,
            )


OUTAGE = _Outage()
_impatient: ContextVar[bool] = ContextVar("impatient", default=False)


@contextmanager
def impatient() -> Iterator[None]:
    """Inside, a write the full broker refuses raises BrokerFull at once: the app's calls,
    which wait for no broker (their work is in the store already; the sweep finds it)."""
    token = _impatient.set(True)
    try:
        yield
    finally:
        _impatient.reset(token)


def is_impatient() -> bool:
    return _impatient.get()


def wait_while_full(write: Callable[[], T], wait_s: float | None = None) -> T:
    """`write()`, tried again with back-off (0.2 s doubling to 5 s, jittered) while Redis
    refuses it for memory, up to `wait_s` (MW_BROKER_FULL_WAIT_S); then BrokerFull. Any
    other error is raised at once."""
    limit = settings_mod.current().broker_full_wait_s if wait_s is None else wait_s
    if _impatient.get():
        limit = 0.0
    refused: list[bool] = []

    def before_sleep(_: Any) -> None:
        refused.append(True)
        OUTAGE.refused(limit)

    try:
        result = Retrying(
            retry=retry_if_exception(is_full),
            wait=wait_exponential_jitter(initial=0.2, max=5.0, jitter=0.5),
            stop=stop_after_delay(limit),
            before_sleep=before_sleep,
        )(write)
    except RetryError as e:
        said = f"the broker refused writes for memory{f' for {limit:g}s' if limit else ''}"
        raise BrokerFull(said) from e.last_attempt.exception()
    if refused:
        log.info("a write the full broker refused went through after %d tries", len(refused) + 1)
    return result


def fullness(r: redis.Redis) -> str | None:
    """What /healthz says of a broker at its memory limit ("full (...)"), or None when it has
    room (or no limit). Read from INFO memory, which servers that disable CONFIG still answer."""
    mem = r.info("memory")
    used, limit = int(mem.get("used_memory", 0)), int(mem.get("maxmemory", 0) or 0)
    if limit and used >= limit:
        return f"full (used {used:,} bytes of maxmemory {limit:,}; writes refused)"
    return None


@dataclass(frozen=True)
class MemorySettings:
    maxmemory: int | None  # bytes; 0 = no limit; None = could not be read
    policy: str | None

    @property
    def evicting(self) -> bool:
        return self.policy is not None and self.policy.startswith(EVICTING)


def memory_settings(r: redis.Redis) -> MemorySettings:
    """The broker's maxmemory and maxmemory-policy (CONFIG GET; INFO memory where CONFIG is
    disabled, as some hosted Redis do); None for what neither answers."""
    try:
        got = r.config_get("maxmemory*")
        return MemorySettings(int(str(got["maxmemory"])), str(got["maxmemory-policy"]))
    except (redis.ResponseError, KeyError, ValueError):
        pass
    try:
        mem = r.info("memory")
    except redis.ResponseError:
        return MemorySettings(None, None)
    limit, policy = mem.get("maxmemory"), mem.get("maxmemory_policy")
    return MemorySettings(
        int(limit) if limit is not None else None, str(policy) if policy else None
    )
