"""The embedded broker, on a real Redis."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis
from tenacity import Retrying, stop_after_delay, wait_fixed

from memory_worker.ops import embedded, inflight


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


def test_a_dead_embedded_redis_comes_back_on_the_same_address_with_its_queue(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    try:
        url = embedded.ensure_running(state)
        client = redis.Redis.from_url(url)
        client.rpush("events", "a queued message")
        assert inflight.claim(client, "warren", "dm-dan")  # a chain's, in flight
        pid = int((state / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_until_gone(pid)
        assert embedded.ensure_running(state) == url  # same port, same password
        assert client.ping()  # the old client's own reconnect finds it
        # The queue kept (append-only file in the state folder): a restart loses no message.
        assert client.lrange("events", 0, -1) == [b"a queued message"]
        assert (state / "appendonly.aof").exists() or (state / "appendonlydir").is_dir()
        # ...but not the claims of chains that died with their connections: the room is free
        assert inflight.claim(client, "warren", "dm-dan")
    finally:
        embedded.stop(state)


def wait_until_gone(pid: int) -> None:
    for attempt in Retrying(stop=stop_after_delay(5), wait=wait_fixed(0.01), reraise=True):
        with attempt:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            raise AssertionError(f"pid {pid} still alive")
