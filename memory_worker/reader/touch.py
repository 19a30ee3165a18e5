"""The touch (DESIGN.md read path step 5), off the caller's path: a bounded background flush.

A room open promises `last_recalled = now, recall_count += 1` for the rows it loaded. The
promise is queued here and one daemon thread applies what is queued, in order, in one write
transaction that may wait out a busy writer — the room open never does. It gathers what a
burst of opens promised (`GATHER_S`) into one transaction, and starts it when no open of this
process is in flight. Bounded: at most
MAX_PENDING touches wait; past that a room open waits for room in the queue rather than drop
a promise. `flush()` (and the exit of the process) drains the queue. A forked child starts
with an empty queue: its parent keeps its own promises.

A touch that still fails after TOUCH_ATTEMPTS (the database gone, a lock never released) is
logged by count and dropped: reinforcement is best effort, a room open never fails for it.

Exact: a touch names each row by id and persona, so a row deleted meanwhile is skipped and the
touch never lands on another row; and it is applied once. Each retry of a batch gets the same
`Attempt`, where `apply` notes what it wrote before its commit, so a retry after a commit that
went through (the failure came later, or from the commit's answer) writes nothing again.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memory_worker.core.per_process import PerProcess

log = logging.getLogger(__name__)

MAX_PENDING = 1024  # ours: touches waiting at most; the app waits past it rather than drop one
TOUCH_ATTEMPTS = 3  # ours: a flush that keeps failing is dropped after this many tries
RETRY_PAUSE_S = 0.2  # ours: between attempts (each may already have waited a busy timeout)
EXIT_FLUSH_S = 5.0  # ours: how long the exit of the process waits for the queue to drain
# ours: a touch waits this long for others to join its write — one transaction for a burst
# of room opens, and none of its work in the middle of them
GATHER_S = 0.05


@dataclass(frozen=True)
class Touch:
    """One room open's promise: these rows of these personas were recalled at `stamp`."""

    url: str
    rows: tuple[tuple[str, tuple[int, ...]], ...]  # (persona, the ids of its rows recalled)
    stamp: str  # ISO, to the second: what last_recalled becomes
    day: float  # the same moment as Unix days, as the read cache ranks it

    @property
    def personas(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.rows)

    @property
    def count(self) -> int:
        return sum(len(ids) for _, ids in self.rows)


@dataclass
class Attempt:
    """One batch's tries: `wrote` is what `apply` noted of its write before committing it
    (None: nothing yet), for the next try to tell whether that commit went through."""

    number: int = 1
    wrote: Any = None


Apply = Callable[[str, Sequence[Touch], Attempt], None]  # one database's touches, in order


class Toucher:
    """The queue of promised touches and the thread that applies them."""

    def __init__(self, apply: Apply, max_pending: int = MAX_PENDING):
        self._apply = apply
        self._max = max_pending
        self._state = PerProcess(self._begin)  # nothing started yet: importing starts nothing
        self.dropped = 0  # touches given up on (logged by count)

    def _begin(self) -> None:
        """Fresh state in a new process (first use, or a forked child), started lazily."""
        self._cv = threading.Condition()
        self._pending: list[Touch] = []
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="memory-touch", daemon=True)
        self._thread.start()
        atexit.register(self.flush, EXIT_FLUSH_S)

    def start(self) -> None:
        """Start the thread in this process if it is not running (first use, or a fork)."""
        self._state.ensure()

    def promise(self, touch: Touch) -> None:
        """Queue a touch; waits only while MAX_PENDING touches are already waiting."""
        self._state.ensure()
        with self._cv:
            while len(self._pending) >= self._max:
                self._cv.wait()
            self._pending.append(touch)
            if len(self._pending) in (1, self._max):  # the thread gathers the ones between
                self._cv.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every touch promised so far is applied (or given up). True if drained."""
        if not self._state.here:
            return True  # nothing promised in this process
        with self._cv:
            return self._cv.wait_for(lambda: not (self._pending or self._busy), timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                gathered = time.monotonic() + GATHER_S
                while len(self._pending) < self._max and (left := gathered - time.monotonic()) > 0:
                    self._cv.wait(left)
                batch, self._pending = self._pending, []
                self._busy = True
                self._cv.notify_all()  # room in the queue again
            try:
                by_url: dict[str, list[Touch]] = {}
                for t in batch:
                    by_url.setdefault(t.url, []).append(t)
                for url, touches in by_url.items():
                    self._apply_with_retries(url, touches)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _apply_with_retries(self, url: str, touches: Sequence[Touch]) -> None:
        attempt = Attempt()
        for number in range(1, TOUCH_ATTEMPTS + 1):
            attempt.number = number
            try:
                self._apply(url, touches, attempt)
                return
            except Exception as exc:  # noqa: BLE001 — a touch must never take the thread down
                if number == TOUCH_ATTEMPTS:
                    self.dropped += len(touches)
                    log.warning(
                        "touch dropped after %d attempts: %d opens, %d rows (%s)",
                        number,
                        len(touches),
                        sum(t.count for t in touches),
                        type(exc).__name__,
                    )
                    return
                time.sleep(RETRY_PAUSE_S * number)
