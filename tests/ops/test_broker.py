"""The embedded broker, on a real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from tenacity import Retrying, stop_after_delay, wait_fixed

from memory_worker.ops import embedded, inflight

# Every test here starts, kills and starts again Redis servers.
pytestmark = pytest.mark.processes


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


APP = """
import sys
from memory_worker import events
from memory_worker.tasks.rooms import on_room_quiet
for _ in sys.stdin:
    print(events.publish(on_room_quiet, "dm-dan"), flush=True)
"""


def app_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MW_BROKER_URL", "REDIS_URL")}
    return {**env, "MW_STATE_DIR": str(state), "MW_DATABASE_URL": "sqlite:///unused.db"}


def test_the_apps_publish_starts_a_killed_embedded_broker_again_and_its_message_lands(
    tmp_path: Path,
) -> None:
    """With the broker SIGKILLed and nothing supervising, the app's next
    `room_quiet` starts it again on its address (as a newly started process would)."""
    state = tmp_path / "state"
    url = embedded.ensure_running(state)
    client = redis.Redis.from_url(url)
    app = subprocess.Popen(
        [sys.executable, "-c", APP],
        env=app_env(state),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert app.stdin is not None and app.stdout is not None
    try:
        app.stdin.write("publish\n")
        app.stdin.flush()
        assert app.stdout.readline().strip() == "True"
        assert client.llen("events") == 1
        kept = client.lindex("events", 0)
        pid = int((state / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_until_gone(pid)
        # The app's next call, the broker gone: True, or False past MW_PUBLISH_TIMEOUT_S on a
        # slow host (that message is left to the sweep, as the README says); the call after
        # that finds the broker back and lands.
        sent = 0
        for _ in range(3):
            app.stdin.write("publish\n")
            app.stdin.flush()
            sent += 1
            if app.stdout.readline().strip() == "True":
                break
        assert embedded.running_url(state) == url  # the app started it: same address
        for attempt in Retrying(stop=stop_after_delay(10), wait=wait_fixed(0.05), reraise=True):
            with attempt:  # the queue kept (append-only file), and a new message beside it
                queue = client.lrange("events", 0, -1)
                assert kept in queue and 2 <= len(queue) <= 1 + sent
    finally:
        app.stdin.close()
        app.wait(timeout=30)
        embedded.stop(state)


STARTER = """
import sys
from pathlib import Path
from memory_worker.ops import embedded
sys.stdin.readline()
print(embedded.ensure_running(Path(sys.argv[1]), own=True), flush=True)
sys.stdin.readline()
"""


def test_processes_that_find_the_embedded_broker_gone_at_once_start_one_server(
    tmp_path: Path,
) -> None:
    """One owner: every process that needs the broker may find it gone at the same moment (a
    reconnect in each worker); the lock lets one start it, the others find it there."""
    state = tmp_path / "state"
    url = embedded.ensure_running(state)
    port = embedded.kept_port(state)
    pid = int((state / "redis.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_until_gone(pid)
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, str(state)],
            env=app_env(state),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for p in starters:  # all imported and waiting: go at once
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        assert {p.stdout.readline().strip() for p in starters if p.stdout} == {url}
        assert len(servers_of(port)) == 1
    finally:
        for p in starters:
            if p.stdin:
                p.stdin.close()
            p.wait(timeout=30)
        embedded.stop(state)
    assert servers_of(port) == []  # no process left behind


def servers_of(port: int | None) -> list[int]:
    """The redis-server processes serving 127.0.0.1:`port`."""
    address = f"127.0.0.1:{port}"
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and "redis-server" in cmdline and address in cmdline:
            if embedded._running(int(proc.name)):
                found.append(int(proc.name))
    return found
