"""The read cache's background catch-up, so that a delete reaches every app process's memory.

A process's read cache (cache.py) is brought up to date by that process's own opens. A row
deleted elsewhere — by the human's delete in another app process, an undo, a reset — would
otherwise stay in every process that held its persona: its ranking columns and its int8
vector, until that process next opened one of the persona's rooms, which may be never.
A delete reaches every copy (docs/design.md §5, §10.11).

So one daemon thread per process, started by the first open (importing starts nothing), runs
the reader's sweep every `read_cache_sweep_s` (MW_READ_CACHE_SWEEP_S, default 5 s): one
statement reads every held persona's version, and a persona that moved is patched from its
change log as its next open would patch it (`reader.catch_up`). A deleted or closed row
leaves the columns and its vector slot is zeroed; an entry the change log no longer reaches is
dropped, not read again. A sweep that fails (the database away) is logged by type and tried
again at the next interval. A forked child starts its own thread at its first open.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from memory_worker.core import settings as settings_mod
from memory_worker.reader import cache_loader
from memory_worker.reader.cache_loader import catch_up_store
from memory_worker.reader.fill import NO_PACK, keep_pack
from memory_worker.reader.threads import OPENS, Worker
from memory_worker.storage import read_packs, store

log = logging.getLogger(__name__)


TICK_S = 1.0  # ours: the longest the thread sleeps before it reads the interval again


class Sweeper(Worker):
    """Runs `sweep()` every `every()` seconds on a daemon thread of its own."""

    name = "memory-read-sweep"

    def __init__(self, sweep: Callable[[], object], every: Callable[[], float]):
        super().__init__()
        self._sweep = sweep
        self._every = every
        self.failures = 0  # sweeps that raised (logged by type)

    def _setup(self) -> None:
        self._passing = threading.Lock()  # held while a sweep runs
        self._started = self._finished = 0

    def wait_for_pass(self, timeout: float) -> bool:
        """Wait until a whole sweep that began after this call has finished. False on timeout
        or when no thread runs in this process."""
        if not self.here:
            return False
        with self._cv:
            begun = self._started
            return self._cv.wait_for(lambda: self._finished > begun, timeout)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No sweep runs inside this block (one under way is waited out first)."""
        if not self.here:
            yield
            return
        with self._passing:
            yield

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            left = last + self._every() - time.monotonic()
            if left > 0:
                time.sleep(min(left, TICK_S))  # the interval may change: read it again soon
                continue
            with self._cv:
                self._started += 1
            with self._passing:
                try:
                    self._sweep()
                except Exception as exc:  # noqa: BLE001 — a sweep must never take the thread down
                    self.failures += 1
                    log.warning(
                        "read cache sweep failed (%s); next in %gs",
                        type(exc).__name__,
                        self._every(),
                    )
            last = time.monotonic()
            with self._cv:
                self._finished += 1
                self._cv.notify_all()


def catch_up(url: str | None = None) -> int:
    """Bring every persona this process holds (for `url`, or for every store) up to the
    store's version, as its next open would: the rows its change log names are read again, a
    deleted or closed one leaves the columns and its vector slot is zeroed. An entry the log
    no longer reaches (or whose history it is not: a restored store) is dropped, not read
    again, and so is everything held of a url whose store has another id now. The LRU order
    stays. Returns how many personas moved. The sweep thread runs it every
    `read_cache_sweep_s`."""
    urls = [url] if url is not None else cache_loader.READ_CACHE.urls()
    moved = 0
    for u in urls:
        moved += catch_up_store(u)
        _refresh_packs(u)
    return moved


def _refresh_packs(url: str) -> None:
    """Write the pack of each persona held for `url` whose kept pack lags past its slack, so
    a process that does not hold it (every process after a deploy) ranks on one near its
    version. One read of the packs' versions; a write only for those that lag."""
    held, sid = cache_loader.READ_CACHE.held(url), cache_loader.READ_CACHE.store_of(url)
    if not held or sid is None:
        return
    OPENS.wait_idle()
    with store.engine(url).connect() as conn:
        kept = read_packs.kept(conn, list(held))
    for p, rows in held.items():
        keep_pack(url, (url, sid, p), rows, kept.get(p, NO_PACK))


SWEEP = Sweeper(catch_up, lambda: settings_mod.current().read_cache_sweep_s)
