"""State a process builds at its first use, and again in a forked child: the reader's touch
flush and its cache sweep each start one daemon thread this way (importing starts nothing).

The first users of a process may race to build it. One builds it under a lock and the
process id is published last, so no thread sees state half made or about to be replaced.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class PerProcess:
    """Runs `build()` once in each process, at the first `ensure()` there."""

    def __init__(self, build: Callable[[], None]):
        self._build = build
        self._pid = -1  # nothing built yet
        self._lock = threading.Lock()

    @property
    def here(self) -> bool:
        """Built in this process (not only in a parent it was forked from)."""
        return self._pid == os.getpid()

    def ensure(self) -> None:
        if self.here:
            return
        with self._lock:
            if not self.here:
                self._build()
                self._pid = os.getpid()
