"""The reader's per-process cache of ranking columns, checked against the store at every open.

Opening a room ranks every row a persona may see, and fetching 10,000 rows into Python costs
more than the whole open should. The columns ranking needs (id, whom, kind, importance, when
last recalled, length, and the embedding for topic relevance) change only when a row is
added, closed, deleted or touched, and every such write bumps the persona's counter in
`persona_memory_versions` (database triggers). Each open reads that one row per persona and
refetches only when it moved.

A stale entry could only mis-rank, never leak: the reader loads the winners' full rows afresh
and passes each through `visible_memories` again. The reader's own touch updates the entry (and
its version, read back inside the touch's transaction) so a room that keeps opening keeps
hitting the cache; a write by anyone else moves the counter and forces a refetch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

CACHE_ENTRIES = 256  # ours: personas × audiences kept per process, least recently used first out
EMBEDDINGS_MAX_ROWS = (
    20_000  # ours: above this a persona's vectors (4 bytes × 768 each) stay on disk
)

Version = int  # persona_memory_versions.version: 0 before the persona's first row
Key = tuple[str, str, bool, tuple[str, ...]]  # (database url, persona, world, human refs)


@dataclass(frozen=True)
class Columns:
    """One persona's visible rows as columns, as of `version`."""

    version: Version
    ids: np.ndarray  # int64, ascending
    groups: np.ndarray  # int64
    kinds: np.ndarray  # int64
    importance: np.ndarray  # float64
    recalled_day: np.ndarray  # float64: Unix day of last_recalled, else created
    chars: np.ndarray  # int64
    unit_vectors: np.ndarray | None = None  # float32 (n, dims), unit rows; zeros where missing

    def touched(self, ids: np.ndarray, day: float, version: Version) -> Columns:
        """The columns after `last_recalled = day` on `ids`, as of `version`."""
        recalled = self.recalled_day.copy()
        recalled[np.isin(self.ids, ids)] = day
        return replace(self, recalled_day=recalled, version=version)


class ReadCache:
    """A small LRU of `Columns`, safe to share between the app's threads."""

    def __init__(self, entries: int = CACHE_ENTRIES):
        self._entries: OrderedDict[Key, Columns] = OrderedDict()
        self._max = entries
        self._lock = threading.Lock()

    def get(self, key: Key, version: Version) -> Columns | None:
        """The entry if it is as fresh as `version`, else None."""
        with self._lock:
            got = self._entries.get(key)
            if got is None or got.version != version:
                return None
            self._entries.move_to_end(key)
            return got

    def put(self, key: Key, columns: Columns) -> None:
        with self._lock:
            self._entries[key] = columns
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def touched(
        self, url: str, ids: np.ndarray, day: float, moves: dict[str, tuple[Version, Version]]
    ) -> None:
        """Apply this process's own touch: `moves[persona]` is its version (before, after)
        the touch. An entry that was not at `before` saw someone else's write: dropped."""
        with self._lock:
            for key, cols in list(self._entries.items()):
                if key[0] != url or key[1] not in moves:
                    continue
                before, after = moves[key[1]]
                if cols.version == before:
                    self._entries[key] = cols.touched(ids, day, after)
                else:
                    del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
