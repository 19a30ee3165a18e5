"""A Celery worker as a child process, for the demo, the exams and the benchmarks.

The same command the Procfile runs, with this process's settings passed down as environment
variables, so the child uses the same database, broker and model provider.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memory_worker.core.constants import QUEUES
from memory_worker.core.settings import Settings

ROOT_WARNING = "You're running the worker with superuser privileges"  # celery.platforms
# The Procfile's pools (memory_worker/tasks/pools/), chosen through Celery's hook for a pool of
# one's own; `procfile_pool=True` runs them instead of Celery's.
PROCFILE_POOLS = {
    "threads": "memory_worker.tasks.pools.threads:Threads",
    "solo": "memory_worker.tasks.pools.solo:Solo",
}
READY_TIMEOUT_S = 60.0  # a cold start imports Celery, SQLAlchemy and google-genai


def start(
    settings: Settings,
    *,
    queues: tuple[str, ...] = QUEUES,
    pool: str = "threads",
    concurrency: int = 4,
    loglevel: str = "WARNING",
    name: str = "demo",
    extra: list[str] | None = None,
    log: Path | None = None,
    procfile_pool: bool = False,
    env_extra: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """The worker; its output goes to `log` when given (the demo keeps its screen clean).
    `env_extra`: more environment (the fault harness's hooks)."""
    # As root (containers, CI) Celery warns on every start; the pickle risk it means is off.
    # Matched by its message: a category in PYTHONWARNINGS must be importable before Celery is
    # ("Invalid -W option ignored" otherwise), and only builtin ones are.
    quiet = f"ignore:{ROOT_WARNING}"
    env = {**os.environ, **settings.as_env(), "PYTHONWARNINGS": quiet, **(env_extra or {})}
    if procfile_pool:
        env["CELERY_CUSTOM_WORKER_POOL"] = PROCFILE_POOLS[pool]
        pool = "custom"
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "--quiet",
        "-A",
        "memory_worker.tasks.celery_app",
        "worker",
        "-Q",
        ",".join(queues),
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--loglevel",
        loglevel,
        "--hostname",
        f"{name}-{os.getpid()}@%h",
        "--without-mingle",
        "--without-gossip",
        *(extra or []),
    ]
    if log is None:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )


def wait_ready(app: Any, timeout: float = READY_TIMEOUT_S) -> None:
    """Block until a worker answers a ping over the broker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError(f"no Celery worker answered within {timeout}s")


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Warm shutdown (SIGTERM lets running tasks finish), then kill if it hangs."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
