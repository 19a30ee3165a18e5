"""What the reader's background threads share: their base, and the room opens in flight.

The fill (fill.py), the sweep (sweep.py) and the touch flush (touch.py) each run on a daemon
thread of their own (`Worker`: started at first use, again in a forked child); a room open
holds `OPENS.opening()` while it runs, and before each step of their work they wait while one
is in flight (`InFlight.wait_idle`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from memory_worker.core.per_process import PerProcess

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


class Worker:
    """One daemon thread in each process, started at first use (importing starts nothing) and
    again in a forked child, with the condition it and its callers wait on and a flag for
    work under way. A subclass names its thread, makes its state (`_setup`) and runs."""

    name = "memory-reader"

    def __init__(self) -> None:
        self._state = PerProcess(self._begin)  # nothing started yet

    def start(self) -> None:
        """Start the thread in this process if it is not running (first use, or a fork)."""
        self._state.ensure()

    @property
    def here(self) -> bool:
        """Whether the thread was started in this process (not only in a parent)."""
        return self._state.here

    def _begin(self) -> None:
        self._cv = threading.Condition()
        self._busy = False
        self._setup()
        threading.Thread(target=self._run, name=self.name, daemon=True).start()

    def _setup(self) -> None:
        """This process's fresh state, made before its thread starts."""

    def _run(self) -> None:
        raise NotImplementedError

    def _idle(self, pending: Callable[[], object], timeout: float | None) -> bool:
        """Wait until nothing is `pending` and no work is under way. True when so (and when
        no thread runs in this process: nothing was handed to it here)."""
        if not self.here:
            return True
        with self._cv:
            return self._cv.wait_for(lambda: not (pending() or self._busy), timeout)


Batch = TypeVar("Batch")


class QueueWorker(Worker, Generic[Batch]):
    """A `Worker` whose thread takes what callers queued, a batch at a time, and works it
    with `_busy` set (what `_idle` waits out). A subclass says whether anything waits
    (`_waiting`), takes a batch under the lock (`_take`: it may wait on `_cv` to gather more)
    and works it outside the lock (`_work`), which must not raise."""

    def _waiting(self) -> bool:
        raise NotImplementedError

    def _take(self) -> Batch:
        raise NotImplementedError

    def _work(self, batch: Batch) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._waiting():
                    self._cv.wait()
                batch = self._take()
                self._busy = True
                self._cv.notify_all()  # room in the queue again
            try:
                self._work(batch)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


OPENS = InFlight()  # this process's room opens in flight: the fill, sweep and touch step aside
