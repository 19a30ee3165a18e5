"""`memory-worker serve` as a real subprocess on a loopback port the OS picks, for the web tests.

It gets this process's settings as environment variables (the test's SQLite file, the test's
Redis); it listens before it prints its banner (which names the port) and its one-time
sign-in link, so it is ready once they are printed.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from memory_worker.core.settings import Settings

START_TIMEOUT_S = 30.0  # a cold start imports Starlette, SQLAlchemy, Jinja2


@dataclass
class Served:
    proc: subprocess.Popen
    base_url: str
    login_url: str | None
    output: list[str] = field(default_factory=list)


def _command() -> list[str]:
    script = Path(sys.executable).with_name("memory-worker")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memory_worker.cli"]


@contextmanager
def serve(settings: Settings, *args: str) -> Iterator[Served]:
    """Run `memory-worker serve --port 0 *args` (the OS picks the port; the banner says which)
    until the block ends; stop it after."""
    env = {**os.environ, **settings.as_env()}
    proc = subprocess.Popen(
        [*_command(), "serve", "--port", "0", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        base, login = _wait_ready(proc, lines, output, wants_login="--user" in args)
        yield Served(proc, base, login, output)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(
    proc: subprocess.Popen, lines: queue.Queue[str], output: list[str], wants_login: bool
) -> tuple[str, str | None]:
    """(the base URL, the sign-in link): serve listens before its banner names the port."""
    deadline = time.monotonic() + START_TIMEOUT_S
    base = login = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {''.join(output)}")
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if line.startswith("memory-worker serve: http://"):
            base = line.split()[2].rstrip("/")
        if "/login?token=" in line:
            login = line.split(": ", 1)[1].strip()
        if base is not None and (login is not None or not wants_login):
            return base, login
    raise AssertionError(f"serve not ready in {START_TIMEOUT_S}s: {''.join(output)}")
