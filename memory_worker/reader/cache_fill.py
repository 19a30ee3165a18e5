"""The read cache's fill, off the caller's path: a cold room open answers first, fills later.

A room open for a persona this process does not hold (its first open, after the LRU let it
go, or too far behind the change log) answers from the persona's pack, or from the rows its
audience can see (reader.load_candidates). The persona's shared entry — every open row, for
every audience, and the vectors of a room's topic — is then read here, on one daemon thread
per process, so the next open of any of its rooms is warm. Importing starts nothing; the
thread starts at the first request, and a forked child starts its own.

The fill never slows the open it follows: an open asks for it as it returns, and the fill
waits at each step while any room open of this process is in flight (`InFlight`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from memory_worker.core.per_process import PerProcess
from memory_worker.core.read_cache import Version
from memory_worker.core.rows import Row

log = logging.getLogger(__name__)

Request = tuple[str, str, bytes | None]  # (database url, persona, a room topic's vector)
# What a cold open read of a persona's winners, and at which version: the fill keeps them.
Winners = Mapping[str, tuple[Version, Mapping[int, Row]]]
Fill = Callable[[str, list[str], list[bytes], Winners], object]

YIELD_MAX_S = 0.25  # ours: the longest background work waits for opens in flight at one step


class InFlight:
    """The room opens this process has in flight: background work steps aside for them.

    The reader's threads (the fill, the sweep) call `wait_idle` between steps; an open holds
    `opening()` while it runs. A steady stream of opens delays the work by at most
    `YIELD_MAX_S` a step, so it is never starved.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._count = 0

    @contextmanager
    def opening(self) -> Iterator[None]:
        with self._cv:
            self._count += 1
        try:
            yield
        finally:
            with self._cv:
                self._count -= 1
                if not self._count:
                    self._cv.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no open is in flight (at most `timeout`, default `YIELD_MAX_S`). True
        when none is."""
        deadline = time.monotonic() + (YIELD_MAX_S if timeout is None else timeout)
        with self._cv:
            while self._count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True


class Filler:
    """Runs `fill(url, personas, topics)` on a daemon thread for what was requested."""

    def __init__(self, fill: Fill):
        self._fill = fill
        self._state = PerProcess(self._begin)
        self.failures = 0  # fills that raised (logged by type; the next open reads again)

    def _begin(self) -> None:
        self._cv = threading.Condition()
        self._pending: dict[tuple[str, str], set[bytes]] = {}
        self._winners: dict[tuple[str, str], tuple[Version, dict[int, Row]]] = {}
        self._busy = False
        threading.Thread(target=self._run, name="memory-read-fill", daemon=True).start()

    def start(self) -> None:
        """Start the thread in this process if it is not running (first use, or a fork)."""
        self._state.ensure()

    def request(
        self, url: str, personas: list[str], topic: bytes | None, winners: Winners | None = None
    ) -> None:
        """Fill these personas' entries (and their cosines to `topic`) soon, keeping with
        them the `winners` rows an open read (the rows of its blocks)."""
        self._state.ensure()
        with self._cv:
            for p in personas:
                topics = self._pending.setdefault((url, p), set())
                if topic is not None:
                    topics.add(topic)
            for p, (version, rows) in (winners or {}).items():
                held = self._winners.get((url, p))
                if held is not None and held[0] == version:
                    rows = {**held[1], **rows}
                self._winners[(url, p)] = (version, dict(rows))
            self._cv.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything requested so far is filled (or given up). True if idle."""
        if not self._state.here:
            return True
        with self._cv:
            return self._cv.wait_for(lambda: not (self._pending or self._busy), timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                url = next(iter(self._pending))[0]
                mine = {k: v for k, v in self._pending.items() if k[0] == url}
                for k in mine:
                    del self._pending[k]
                winners = {k[1]: self._winners.pop(k) for k in mine if k in self._winners}
                self._busy = True
            try:
                topics = sorted({t for v in mine.values() for t in v})
                self._fill(url, sorted(p for _, p in mine), topics, winners)
            except Exception as exc:  # noqa: BLE001 — a fill must never take the thread down
                self.failures += 1
                log.warning("read cache fill failed (%s); the next open reads", type(exc).__name__)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
