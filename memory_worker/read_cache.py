"""The reader's per-process cache of ranking columns, bounded in bytes, checked at every open.

Opening a room ranks every row a persona may see, and fetching 100,000 rows into Python costs
more than the whole open should. The columns ranking needs (id, whom, kind, importance, when
last recalled, length) change only when a row is added, closed, deleted or touched, and every
such write bumps the persona's counter in `persona_memory_versions` (database triggers). Each
open reads that counter and refetches only when it moved.

One entry per persona, shared by every audience: a private chat with Dan and one with Cara
select different rows of the same columns (`groups`), so world rows and vectors are held once.
A room with a topic needs each row's embedding: they are kept as one int8 matrix per persona
(768 bytes a row), loaded the first time a topic room opens, and the cosines to each topic
are kept beside it. A row's embedding is written once, with the row, so a refetch after
someone else's write keeps the vectors and cosines of the rows it already had and reads only
the new rows' embeddings.

Memory is bounded by one setting, `read_cache_bytes` (MW_READ_CACHE_BYTES, default 256 MiB),
least recently used out first. A persona whose vectors alone would pass the bound keeps the
vectors of its newest rows that fit; older rows then rank on recency and importance only
(relevance 0), the same on every open, cold or warm. A persona whose columns alone pass the
bound is ranked and not kept.

A stale entry could only mis-rank, never leak: the reader loads the winners' full rows afresh
and passes each through `visible_memories` again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from memory_worker import settings as settings_mod
from memory_worker.vectors import int8_cosines, int8_norms, stack_int8

TOPICS_PER_PERSONA = 4  # ours: the cosines kept per persona, one array per room topic
ENTRY_OVERHEAD_BYTES = 512  # ours: the Python objects around an entry's arrays

Version = int  # persona_memory_versions.version: 0 before the persona's first row
Key = tuple[str, str]  # (database url, persona)
# Reads the embeddings of these row ids: id → int8 blob (missing ids: no embedding).
LoadVectors = Callable[[Sequence[int]], Mapping[int, bytes | None]]


@dataclass
class PersonaRows:
    """Every open row of one persona, as columns sorted by id, as of `version`.

    `vectors` holds the int8 embeddings of the rows from `vectors_from` on (all of them unless
    the byte bound cut the oldest off); `cosines` maps a topic vector to each row's cosine to it.
    """

    version: Version
    ids: np.ndarray  # int64, ascending
    groups: np.ndarray  # int64: WORLD_GROUP, a human id, or NO_ONE (no audience sees it)
    kinds: np.ndarray  # int64
    importance: np.ndarray  # float64
    recalled_day: np.ndarray  # float64: Unix day of last_recalled, else created
    chars: np.ndarray  # int64
    vectors: np.ndarray | None = None  # int8 (n - vectors_from, dims)
    norms: np.ndarray | None = None  # float32: the length of each row of `vectors`
    vectors_from: int = 0
    cosines: OrderedDict[bytes, np.ndarray] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def base_bytes(self) -> int:
        cols = (self.ids, self.groups, self.kinds, self.importance, self.recalled_day, self.chars)
        return ENTRY_OVERHEAD_BYTES + sum(a.nbytes for a in cols)

    @property
    def nbytes(self) -> int:
        held = self.base_bytes + sum(c.nbytes for c in self.cosines.values())
        if self.vectors is not None and self.norms is not None:
            held += self.vectors.nbytes + self.norms.nbytes
        return held

    def touched(self, batches: Sequence[tuple[np.ndarray, float]], version: Version) -> PersonaRows:
        """The columns after `last_recalled = day` on each batch's ids in turn, as of `version`.

        A copy: another thread may be ranking on this entry right now.
        """
        recalled = self.recalled_day.copy()
        for ids, day in batches:
            at = np.searchsorted(self.ids, ids)
            at = at[(at < len(self.ids)) & (self.ids[np.minimum(at, len(self.ids) - 1)] == ids)]
            recalled[at] = day
        return replace(
            self, recalled_day=recalled, version=version, cosines=OrderedDict(self.cosines)
        )


def _columns_of(rows: PersonaRows) -> dict[str, Any]:
    """The columns a refetch renews; vectors and cosines stay."""
    names = ("version", "ids", "groups", "kinds", "importance", "recalled_day", "chars")
    return {n: getattr(rows, n) for n in names}


def _norms(rows: PersonaRows) -> np.ndarray:
    assert rows.vectors is not None
    return rows.norms if rows.norms is not None else int8_norms(rows.vectors)


class ReadCache:
    """An LRU of `PersonaRows` bounded in bytes, safe to share between the app's threads."""

    def __init__(self, max_bytes: int | None = None):
        self._entries: OrderedDict[Key, PersonaRows] = OrderedDict()
        self._max = max_bytes  # None: the setting, read at first use (importing reads nothing)
        self._lock = threading.Lock()
        self.bytes = 0

    @property
    def max_bytes(self) -> int:
        if self._max is None:
            self._max = settings_mod.current().read_cache_bytes
        return self._max

    def get(self, key: Key, version: Version) -> PersonaRows | None:
        """The entry if it is as fresh as `version`, else None."""
        with self._lock:
            got = self._entries.get(key)
            if got is None or got.version != version:
                return None
            self._entries.move_to_end(key)
            return got

    def previous(self, key: Key) -> PersonaRows | None:
        """Whatever entry is held, fresh or not (a refetch reuses its vectors)."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Key, rows: PersonaRows) -> None:
        """Keep `rows` unless a newer version is already held (the counter only grows)."""
        with self._lock:
            held = self._entries.get(key)
            if held is not None and held.version > rows.version:
                return
            self._store(key, rows)

    def _store(self, key: Key, rows: PersonaRows) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old.nbytes
        if rows.nbytes > self.max_bytes:
            return  # bigger than the whole bound: ranked, not kept
        self._entries[key] = rows
        self.bytes += rows.nbytes
        while self.bytes > self.max_bytes:
            _, out = self._entries.popitem(last=False)
            self.bytes -= out.nbytes

    def relevance(
        self, key: Key, rows: PersonaRows, topic: bytes, load: LoadVectors, *, keep: bool = True
    ) -> np.ndarray:
        """Each row's cosine to `topic` (0 for rows whose vectors the bound left out); kept
        beside the rows unless `keep` is False."""
        got = rows.cosines.get(topic)
        if got is not None:
            return got
        if rows.vectors is None or rows.vectors.shape[1] != len(topic):
            rows = self._with_vectors(key, rows, None, load, len(topic))
        cos = np.zeros(len(rows))
        if rows.vectors is not None and rows.vectors.shape[1] == len(topic):
            cos[rows.vectors_from :] = int8_cosines(rows.vectors, topic, rows.norms)
        if not keep:
            return cos
        with self._lock:
            rows.cosines[topic] = cos
            while len(rows.cosines) > TOPICS_PER_PERSONA:
                rows.cosines.popitem(last=False)
            if self._entries.get(key) is rows:
                self.bytes += cos.nbytes  # may pass the bound until the next put trims it
        return cos

    def carry_over(self, key: Key, fresh: PersonaRows, load: LoadVectors) -> PersonaRows:
        """`fresh` with the vectors and cosines of the rows the previous entry already held,
        reading only the new rows' embeddings. Without a previous topic open: as is."""
        old = self.previous(key)
        if old is None or old.vectors is None:
            return fresh
        return self._with_vectors(key, fresh, old, load, old.vectors.shape[1])

    def _with_vectors(
        self,
        key: Key,
        rows: PersonaRows,
        old: PersonaRows | None,
        load: LoadVectors,
        dims: int,
    ) -> PersonaRows:
        """`rows` with the int8 vectors of its newest rows that fit the bound (and, from
        `old`, the cosines of rows it shares), stored in the cache."""
        room = self.max_bytes - rows.base_bytes - TOPICS_PER_PERSONA * 8 * len(rows)
        fit = max(0, min(len(rows), room // dims))
        start = len(rows) - fit
        ids = rows.ids[start:]
        if old is not None and old.vectors is not None and np.array_equal(old.ids, rows.ids):
            if old.vectors_from == start:  # the same rows (someone else touched some): share
                return self._keep(key, replace(old, **_columns_of(rows)))
        if (
            old is not None
            and old.vectors is not None
            and start == old.vectors_from == 0
            and np.array_equal(rows.ids[: len(old)], old.ids)
        ):  # rows only added (the common write): extend rather than rebuild
            new = rows.ids[len(old) :]
            found = load(new.tolist()) if new.size else {}
            more = stack_int8([found.get(int(i)) for i in new], dims)
            vectors = np.concatenate([old.vectors, more])
            norms = np.concatenate([_norms(old), int8_norms(more)])
            out = replace(rows, vectors=vectors, norms=norms, vectors_from=0)
            for topic, was in old.cosines.items():
                out.cosines[topic] = np.concatenate(
                    [was, int8_cosines(more, topic, norms[len(old) :])]
                )
            return self._keep(key, out)
        vectors = np.zeros((fit, dims), dtype=np.int8)
        have = np.zeros(fit, dtype=bool)
        clipped = np.zeros(fit, dtype=np.int64)
        if old is not None and old.vectors is not None and len(old):
            at = np.searchsorted(old.ids, ids)
            clipped = np.minimum(at, len(old) - 1)
            have = (at < len(old)) & (old.ids[clipped] == ids) & (clipped >= old.vectors_from)
            vectors[have] = old.vectors[clipped[have] - old.vectors_from]
        need = ids[~have]
        if need.size:
            found = load(need.tolist())
            vectors[~have] = stack_int8([found.get(int(i)) for i in need], dims)
        norms = int8_norms(vectors)
        out = replace(rows, vectors=vectors, norms=norms, vectors_from=start, cosines=OrderedDict())
        for topic, was in (old.cosines if old is not None else {}).items():
            cos = np.zeros(len(rows))
            part = cos[start:]  # a view: filling it fills cos
            part[have] = was[clipped[have]]
            if need.size:
                part[~have] = int8_cosines(vectors[~have], topic, norms[~have])
            out.cosines[topic] = cos
        return self._keep(key, out)

    def _keep(self, key: Key, rows: PersonaRows) -> PersonaRows:
        with self._lock:
            held = self._entries.get(key)
            if held is None or held.version <= rows.version:
                self._store(key, rows)
        return rows

    def touched(
        self,
        url: str,
        batches: Sequence[tuple[np.ndarray, float]],
        moves: Mapping[str, tuple[Version, Version]],
    ) -> None:
        """Apply this process's own touches: `moves[persona]` is its version (before, after)
        them. An entry that was not at `before` saw someone else's write: dropped."""
        with self._lock:
            for key in list(self._entries):
                if key[0] != url or key[1] not in moves:
                    continue
                before, after = moves[key[1]]
                rows = self._entries[key]
                if rows.version == before:
                    self._entries[key] = rows.touched(batches, after)  # same size
                else:
                    self.bytes -= self._entries.pop(key).nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0
