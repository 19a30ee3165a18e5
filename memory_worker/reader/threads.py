"""What the reader's background threads share: room opens in flight, which they step aside for.

The fill (fill.py), the sweep (sweep.py) and the touch flush (touch.py) each run on a daemon
thread of their own; a room open holds `OPENS.opening()` while it runs, and before each step
of their work they wait while one is in flight (`InFlight.wait_idle`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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


OPENS = InFlight()  # this process's room opens in flight: the fill, sweep and touch step aside
