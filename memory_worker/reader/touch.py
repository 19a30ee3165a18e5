"""The touch (docs/design.md §3 step 5), off the caller's path: a bounded background flush.

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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection

from memory_worker.core import settings as settings_mod
from memory_worker.core.read_columns import Batches, Version, Versions
from memory_worker.reader import cache_loader
from memory_worker.reader.threads import OPENS, QueueWorker
from memory_worker.storage import read_path

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


class Toucher(QueueWorker[list[Touch]]):
    """The queue of promised touches and the thread that applies them."""

    name = "memory-touch"

    def __init__(self, apply: Apply, max_pending: int = MAX_PENDING):
        super().__init__()
        self._apply = apply
        self._max = max_pending
        self.dropped = 0  # touches given up on (logged by count)

    def _setup(self) -> None:
        self._pending: list[Touch] = []
        atexit.register(self.flush, EXIT_FLUSH_S)

    def promise(self, touch: Touch) -> None:
        """Queue a touch; waits only while MAX_PENDING touches are already waiting."""
        self.start()
        with self._cv:
            while len(self._pending) >= self._max:
                self._cv.wait()
            self._pending.append(touch)
            if len(self._pending) in (1, self._max):  # the thread gathers the ones between
                self._cv.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every touch promised so far is applied (or given up). True if drained."""
        return self._idle(lambda: self._pending, timeout)

    def _waiting(self) -> bool:
        return bool(self._pending)

    def _take(self) -> list[Touch]:
        gathered = time.monotonic() + GATHER_S
        while len(self._pending) < self._max and (left := gathered - time.monotonic()) > 0:
            self._cv.wait(left)
        batch, self._pending = self._pending, []
        return batch

    def _work(self, batch: list[Touch]) -> None:
        by_url: dict[str, list[Touch]] = {}
        for t in batch:
            by_url.setdefault(t.url, []).append(t)
        for url, touches in by_url.items():
            self._apply_with_retries(url, touches)

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


def promise_touch(url: str | None, rows: Mapping[str, Sequence[int]], when: datetime) -> None:
    """Promise `last_recalled = when, recall_count += 1` for these rows, by persona: a row is
    named by its id and its persona. The background flush applies it (`flush_touches` waits)."""
    url = url or settings_mod.current().database_url
    stamp = _touch_stamp(when)
    named = tuple((p, tuple(sorted(ids))) for p, ids in sorted(rows.items()) if ids)
    TOUCHES.promise(Touch(url, named, stamp, _unix_day(stamp)))


def _touch_stamp(when: datetime) -> str:
    return when.astimezone(UTC).replace(microsecond=0).isoformat()


def _unix_day(stamp: str) -> float:
    """The Unix day a touch stamps, as a refetch would read it back."""
    return datetime.fromisoformat(stamp).timestamp() / 86400.0


def _apply_touches(url: str, touches: Sequence[Touch], attempt: Attempt) -> None:
    """One write transaction for every queued touch of one database, in order, each row named
    by id and persona (one deleted meanwhile is skipped); then the read cache takes the
    touches too, with each persona's version (before, after) read inside it.

    Once: the versions before and after the write are noted in `attempt` before the commit. A
    retry finds that commit went through when the change log holds a persona's version
    `after` with its stamp (random per write: no other write has it), and writes nothing
    again; only the cache is left to take the touches.

    It waits out a busy writer for the store's usual timeout: nobody is waiting on it.
    """
    personas = sorted({p for t in touches for p in t.personas})
    merged = _merged(touches)
    OPENS.wait_idle()  # a room open in flight first
    with read_path.touching(url) as conn:
        now = read_path.versions(conn, personas, lock=True)
        if not _committed(conn, attempt.wrote):
            for p, batches in merged.items():
                for ids, _day, stamp, times in batches:
                    read_path.touch(conn, p, ids.tolist(), stamp, times)
            attempt.wrote = (now, read_path.versions(conn, personas))
            cache_loader.READ_CACHE.expect(url, now.store, _moves(merged, *attempt.wrote))
    before, after = attempt.wrote
    cache_loader.READ_CACHE.touched(url, after.store, _moves(merged, before, after))


def _merged(touches: Sequence[Touch]) -> dict[str, Batches]:
    """Each persona's touched rows, the touches of a burst folded together in order: a row
    takes the stamp of the last touch that named it, and its recall count one for each; the
    rows that end alike are one batch (one write), and no row is in two."""
    last: dict[str, dict[int, tuple[str, float, int]]] = {}
    for t in touches:
        for p, ids in t.rows:
            rows = last.setdefault(p, {})
            for i in ids:
                rows[i] = (t.stamp, t.day, rows.get(i, ("", 0.0, 0))[2] + 1)
    out: dict[str, Batches] = {}
    for p, rows in last.items():
        alike: dict[tuple[str, float, int], list[int]] = {}
        for i, end in rows.items():
            alike.setdefault(end, []).append(i)
        out[p] = [
            (np.array(sorted(ids), dtype=np.int64), day, stamp, times)
            for (stamp, day, times), ids in alike.items()
        ]
    return out


def _moves(
    merged: Mapping[str, Batches], before: Versions, after: Versions
) -> dict[str, tuple[Version, Version, Batches]]:
    """Each persona's version before and after these touches, and the rows they touched."""
    return {p: (before[p], after[p], batches) for p, batches in merged.items()}


def _committed(conn: Connection, wrote: tuple[Versions, Versions] | None) -> bool:
    """Whether the write an earlier attempt noted (versions before and after it) is in the
    store: the change log holds some persona's version `after`, stamp and all (however many
    rows the batch touched). A write that moved no persona touched no row: there is nothing
    to apply twice."""
    if wrote is None:
        return False
    before, after = wrote
    moved = [p for p in after.of if after[p] != before[p]]
    return not moved or any(read_path.logged(conn, p, after[p]) for p in moved)


TOUCHES = Toucher(_apply_touches)
