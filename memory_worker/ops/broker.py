"""Which Redis the project uses: the configured URL, or the embedded one (started on demand).

Also the small Redis client the tasks use for the global model-call rate limit.
"""

from __future__ import annotations

import os
from functools import lru_cache

import redis

from memory_worker.core import settings as settings_mod
from memory_worker.core.settings import EMBEDDED
from memory_worker.ops.embedded import ensure_running


def url() -> str:
    """The broker URL in force; with none set, the embedded Redis, started (and owned by this
    process) if it is not running. Called when a process first sends or consumes, never at
    import."""
    s = settings_mod.current()
    if s.broker_url == EMBEDDED:
        return ensure_running(s.state_dir, own=True)
    return s.broker_url


@lru_cache(maxsize=4)
def _client(broker_url: str, pid: int) -> redis.Redis:
    return redis.Redis.from_url(broker_url)


def client(broker_url: str) -> redis.Redis:
    """A Redis client for `broker_url`, one per process (never shared across a fork)."""
    return _client(broker_url, os.getpid())
