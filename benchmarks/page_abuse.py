"""The page under abusive clients: does `memory-worker serve` stay small and answer?

One real `memory-worker serve --user 42` on loopback (a temp SQLite store seeded like the
demo), and, for `--seconds` (default 20), at once and without pause:

- `--declared N` clients that POST /logout declaring a 1 GB form and then push 1 MB writes at
  it (the first attack measured), reconnecting as soon as they are refused;
- `--chunked N` signed-in clients that POST /api/note a chunked body of 64 KB chunks without end;
- `--slow-body N` signed-in clients that declare 16,000 bytes and send one byte a second;
- `--slowloris N` clients that send their request headers one byte a second and never finish
  (reconnecting when hung up on);

while one normal user, signed in through the printed link, loads the page (GET /) again and
again. Before the abuse the same user loads it alone for `--warmup` seconds.

Printed: the server's resident memory (VmRSS: before, peak during, after), the bytes the
abusers pushed, the answers they got by status, and the normal user's page latency (median and
p95, alone and under abuse) with any failed loads. Loopback only; bounded in clients and time.

    .venv/bin/python benchmarks/page_abuse.py [--seconds 20] [--json F]

Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import httpx

from memory_worker import demo
from memory_worker.storage import store
from memory_worker.web.security import SESSION_COOKIE

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"  # loopback only
MB = 2**20


@dataclass
class Tally:
    """What one kind of abuser did: bytes it wrote into its sockets (offered: the server read
    only what it had to), answers by status ("no answer": hung up on), connections made."""

    sent: int = 0
    connections: int = 0
    answers: Counter[str] = field(default_factory=Counter)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssWatch(threading.Thread):
    """Samples the server's VmRSS every 20 ms; `peak` since the last `reset`."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            try:
                self.peak = max(self.peak, rss_kb(self.pid))
            except OSError:
                return

    def reset(self) -> None:
        self.peak = rss_kb(self.pid)


def start_server(tmp: Path) -> tuple[subprocess.Popen[str], str, str]:
    db = tmp / "page.db"
    url = f"sqlite:///{db}"
    store.init_db(url)
    demo.seed(store.engine(url))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MW_")},
        "MW_DATABASE_URL": url,
        "MW_STATE_DIR": str(tmp / "state"),
    }
    script = Path(sys.executable).with_name("memory-worker")
    proc = subprocess.Popen(
        [str(script), "serve", "--user", "42", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    base = link = None
    for line in proc.stdout:
        if line.startswith("memory-worker serve: http://"):
            base = line.split()[2].rstrip("/")
        if "/login?token=" in line:
            link = line.split(": ", 1)[1].strip()
            break
    if base is None or link is None:
        raise SystemExit(f"serve did not start: exit {proc.poll()}")
    threading.Thread(target=lambda: [None for _ in proc.stdout or []], daemon=True).start()
    return proc, base, link


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


async def status_of(reader: asyncio.StreamReader) -> str:
    try:
        line = await asyncio.wait_for(reader.readline(), timeout=15)
    except (TimeoutError, ConnectionError):
        return "no answer"
    parts = line.split()
    return parts[1].decode() if len(parts) > 1 else "closed"


async def push(
    port: int,
    path: str,
    headers: str,
    pieces: Callable[[], Iterator[bytes]],
    pause_s: float,
    until: float,
    t: Tally,
) -> None:
    """POST `path` with `headers`, then the body's pieces (`pause_s` apart) until the server
    answers or hangs up; tally the answer; again, until `until`."""
    while time.monotonic() < until:
        t.connections += 1
        writer = None
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n{headers}\r\n".encode())
            for piece in pieces():
                answered = reader._buffer or reader.at_eof()  # noqa: SLF001
                if answered or time.monotonic() > until:
                    break
                writer.write(piece)
                await writer.drain()
                t.sent += len(piece)
                if pause_s:
                    await asyncio.sleep(pause_s)
            t.answers[await status_of(reader)] += 1
        except ConnectionError:
            t.answers["hung up"] += 1
        finally:
            if writer is not None:
                writer.close()


def declared(port: int, until: float, t: Tally) -> Awaitable[None]:
    """POST /logout declaring a 1 GB form (1,000 fields of 1 MB), then pushing it."""
    field_ = b"f=" + b"x" * (MB - 3) + b"&"
    form = f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {1000 * MB}\r\n"
    return push(port, "/logout", form, lambda: repeat(field_, 1000), 0, until, t)


def signed_in(cookie: str, csrf: str) -> str:
    cookies = f"Cookie: {SESSION_COOKIE}={cookie}\r\n"
    return f"Content-Type: application/json\r\n{cookies}X-CSRF-Token: {csrf}\r\n"


def chunked(port: int, cookie: str, csrf: str, until: float, t: Tally) -> Awaitable[None]:
    """A signed-in POST /api/note whose chunked body never ends."""
    frame = b"10000\r\n" + b"x" * 65536 + b"\r\n"
    headers = signed_in(cookie, csrf) + "Transfer-Encoding: chunked\r\n"
    return push(port, "/api/note", headers, lambda: repeat(frame), 0, until, t)


def slow_body(port: int, cookie: str, csrf: str, until: float, t: Tally) -> Awaitable[None]:
    """A signed-in POST declaring 16,000 bytes and sending one a second."""
    headers = signed_in(cookie, csrf) + "Content-Length: 16000\r\n"
    return push(port, "/api/note", headers, lambda: repeat(b" ", 16000), 1.0, until, t)


async def slowloris(port: int, until: float, t: Tally) -> None:
    """Request headers one byte a second, never finished; reconnecting when hung up on."""
    head = f"GET / HTTP/1.1\r\nHost: {HOST}:{port}\r\nX-Padding: " + "a" * 10_000
    while time.monotonic() < until:
        t.connections += 1
        writer = None
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            for ch in head:
                if time.monotonic() > until or reader.at_eof():
                    break
                writer.write(ch.encode())
                await writer.drain()
                t.sent += 1
                await asyncio.sleep(1)
            t.answers["held to the end" if not reader.at_eof() else "hung up on"] += 1
        except ConnectionError:
            t.answers["hung up on"] += 1
        finally:
            if writer is not None:
                writer.close()


async def user(base: str, client: httpx.AsyncClient, until: float) -> tuple[list[float], int]:
    """The normal user: the page, again and again; (latencies in ms, failed loads)."""
    times, failed = [], 0
    while time.monotonic() < until:
        t0 = time.perf_counter()
        try:
            r = await client.get(base + "/", timeout=30)
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        times.append((time.perf_counter() - t0) * 1000)
        failed += not ok
        await asyncio.sleep(0.05)
    return times, failed


async def main_async(a: argparse.Namespace, base: str, link: str, watch: RssWatch) -> dict:
    port = int(base.rsplit(":", 1)[1])
    async with httpx.AsyncClient() as client:
        await client.get(link, follow_redirects=True)
        csrf = (await client.get(base + "/api/session")).json()["csrf_token"]
        cookie = client.cookies[SESSION_COOKIE]
        alone, failed_alone = await user(base, client, time.monotonic() + a.warmup)
        before = rss_kb(watch.pid)
        watch.reset()
        until = time.monotonic() + a.seconds
        tallies = {k: Tally() for k in ("declared", "chunked", "slow_body", "slowloris")}
        abusers = [
            *[declared(port, until, tallies["declared"]) for _ in range(a.declared)],
            *[chunked(port, cookie, csrf, until, tallies["chunked"]) for _ in range(a.chunked)],
            *[
                slow_body(port, cookie, csrf, until, tallies["slow_body"])
                for _ in range(a.slow_body)
            ],
            *[slowloris(port, until, tallies["slowloris"]) for _ in range(a.slowloris)],
        ]
        results = await asyncio.gather(user(base, client, until), *abusers)
        under, failed_under = results[0]
        peak = watch.peak
        await asyncio.sleep(2)
        after = rss_kb(watch.pid)
    return {
        "seconds": a.seconds,
        "clients": {
            "declared": a.declared,
            "chunked": a.chunked,
            "slow_body": a.slow_body,
            "slowloris": a.slowloris,
        },
        "rss_mb": {"before": before / 1024, "peak": peak / 1024, "after": after / 1024},
        "abusers": {
            k: {"offered_mb": v.sent / MB, "connections": v.connections, "answers": dict(v.answers)}
            for k, v in tallies.items()
        },
        "user_alone_ms": {
            "loads": len(alone),
            "median": statistics.median(alone),
            "p95": percentile(alone, 0.95),
            "failed": failed_alone,
        },
        "user_under_abuse_ms": {
            "loads": len(under),
            "median": statistics.median(under),
            "p95": percentile(under, 0.95),
            "failed": failed_under,
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--declared", type=int, default=40)
    p.add_argument("--chunked", type=int, default=20)
    p.add_argument("--slow-body", type=int, default=50)
    p.add_argument("--slowloris", type=int, default=100)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, base, link = start_server(Path(tmp))
        watch = RssWatch(proc.pid)
        watch.start()
        try:
            out = asyncio.run(main_async(a, base, link, watch))
        finally:
            watch.stop.set()
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps(out, indent=2))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
