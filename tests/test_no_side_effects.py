"""Importing the app's modules starts nothing; the embedded Redis lives as long as its owner.

Each check runs a fresh interpreter with no broker configured and its own state folder, the
folder where the embedded Redis writes its config and pid before it starts: if it stays empty,
no server was started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

APP_MODULES = (
    "memory_worker.events",
    "memory_worker.reader",
    "memory_worker.controls",
    "memory_worker.tasks.pipeline",
    "memory_worker.tasks.rooms",
    "memory_worker.tasks.celery_app",
    "memory_worker.cli",
    "memory_worker.demo",
)


pytestmark = pytest.mark.processes  # each test starts interpreters and an embedded Redis


def run_python(code: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "REDIS_"))}
    env["MW_STATE_DIR"] = str(state)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


def test_importing_the_apps_modules_starts_no_server(tmp_path: Path) -> None:
    state = tmp_path / "state"
    imports = "; ".join(f"import {m}" for m in APP_MODULES)
    out = run_python(imports + "; print('imported')", state)
    assert out.returncode == 0, out.stderr
    assert "imported" in out.stdout
    assert not state.exists() or not any(state.iterdir()), "an import started the embedded Redis"


def test_the_process_that_starts_the_embedded_redis_stops_it_when_it_exits(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    code = (
        "from memory_worker.tasks.celery_app import app\n"
        "assert app.conf.broker_url.startswith('redis://')\n"  # first use resolves the broker
        "import pathlib, sys\n"
        f"print(pathlib.Path({str(state)!r}, 'redis.pid').read_text().strip())\n"
    )
    out = run_python(code, state)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    assert not alive(pid), "the embedded redis-server outlived the process that started it"
    assert (state / "redis.json").exists()  # its address is kept: the next start reuses it


STARTER = (
    "from memory_worker.tasks.celery_app import app\n"
    "import pathlib, sys\n"
    "print(app.conf.broker_url, flush=True)\n"  # first use starts the embedded Redis
    "sys.stdin.readline()\n"  # until the test has its own client connected
)


def test_an_owner_that_exits_while_another_process_uses_the_broker_hands_it_on(
    tmp_path: Path,
) -> None:
    """The process that started the embedded Redis once shut it down at its exit, a
    routine worker restart taking every queued message with it."""
    import redis

    from memory_worker.ops import embedded

    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "REDIS_"))}
    env["MW_STATE_DIR"] = str(state)
    owner = subprocess.Popen(
        [sys.executable, "-c", STARTER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert owner.stdout is not None and owner.stdin is not None
        url = owner.stdout.readline().strip()
        other = redis.Redis.from_url(url)
        other.rpush("events", "queued")  # another process, connected and using it
        owner.stdin.write("\n")
        owner.stdin.close()
        assert owner.wait(timeout=60) == 0
        pid = int((state / "redis.pid").read_text())
        assert alive(pid), "the owner stopped a broker another process was using"
        assert other.lrange("events", 0, -1) == [b"queued"]
        other.close()
    finally:
        owner.kill()
        embedded.stop(state)


def test_under_the_supervisor_no_worker_owns_the_broker(tmp_path: Path) -> None:
    """While `memory-worker run` supervises (its pid in the state folder), a process that
    finds the broker down and starts it does not stop it when it exits."""
    from memory_worker.ops import embedded

    state = tmp_path / "state"
    state.mkdir()
    (state / embedded.SUPERVISOR_PID).write_text(str(os.getpid()))  # this test plays it
    code = (
        "from memory_worker.tasks.celery_app import app\n"
        "assert app.conf.broker_url.startswith('redis://')\n"
        "import pathlib\n"
        f"print(pathlib.Path({str(state)!r}, 'redis.pid').read_text().strip())\n"
    )
    try:
        out = run_python(code, state)
        assert out.returncode == 0, out.stderr
        assert alive(int(out.stdout.strip())), "a worker's exit stopped the supervisor's broker"
    finally:
        embedded.stop(state)
