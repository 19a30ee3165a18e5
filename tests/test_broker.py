"""The embedded broker and the global rate limit, on a real Redis."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from memory_worker import embedded, ratelimit
from memory_worker.constants import REDIS_RATE_KEY


def test_the_embedded_redis_is_started_once_and_found_again(tmp_path: Path) -> None:
    state = tmp_path / "state"
    try:
        url = embedded.ensure_running(state)
        assert embedded.ensure_running(state) == url  # a second process finds the same one
        assert redis.Redis.from_url(url).ping()
        bare = url.replace(url.split("@")[0] + "@", "redis://")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(bare).ping()  # loopback, and a password all the same
        assert "127.0.0.1" in url
    finally:
        assert embedded.stop(state)


def test_the_rate_limit_never_lets_more_than_its_share_into_one_second(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(REDIS_RATE_KEY.format(name="test", second="*")):
        client.delete(key)
    seconds: Counter[int] = Counter()
    for _ in range(7):
        ratelimit.acquire(client, "test", per_second=3)
        seconds[int(time.time())] += 1
    assert max(seconds.values()) <= 3
    assert sum(seconds.values()) == 7


def test_the_rate_limit_gives_up_after_its_longest_wait(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = REDIS_RATE_KEY.format(name="full", second=int(time.time()))
    client.set(key, 10**6, ex=5)
    client.set(REDIS_RATE_KEY.format(name="full", second=int(time.time()) + 1), 10**6, ex=5)
    with pytest.raises(ratelimit.RateLimited):
        ratelimit.acquire(client, "full", per_second=1, max_wait=0.2)
