"""A global rate limit on model calls, shared by every worker through Redis.

Celery's own `rate_limit` is per worker (DESIGN.md "Traps"); this is a fixed one-second
window counted with INCR, so N workers together stay under the provider's quota.
"""

from __future__ import annotations

import time

import redis

from memory_worker.constants import RATE_WINDOW_TTL_S, REDIS_RATE_KEY

MAX_WAIT_S = 30.0  # past this, give the slot back to the queue: the caller retries later


class RateLimited(Exception):
    """Waited MAX_WAIT_S without getting a slot."""


def acquire(
    client: redis.Redis, name: str, per_second: float, *, max_wait: float = MAX_WAIT_S
) -> float:
    """Block until a slot in the current one-second window is ours. Returns seconds waited."""
    allowed = max(1, int(per_second))
    started = time.monotonic()
    while True:
        now = time.time()
        key = REDIS_RATE_KEY.format(name=name, second=int(now))
        pipe = client.pipeline()
        pipe.incr(key)
        pipe.expire(key, RATE_WINDOW_TTL_S)
        count, _ = pipe.execute()
        if int(count) <= allowed:
            return time.monotonic() - started
        if time.monotonic() - started > max_wait:
            raise RateLimited(f"no {name} slot within {max_wait}s at {allowed}/s")
        time.sleep(max(0.001, 1.0 - (now % 1.0)))
