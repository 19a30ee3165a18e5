"""One persona's vectors, a slot a row, under the byte bound: the read cache's third part.

A room with a topic ranks on each row's cosine to it. A persona's embeddings live in one
append-only int8 store (`Vectors`, 768 bytes a row) with the cosines to its last topics beside
them; an entry's `slots` say which slot holds each row's. The bound (`read_cache_bytes`) lets
an entry hold the vectors of its newest rows that fit (`slots_allowed`); older rows rank with
relevance 0, the same on every open, cold or warm. The functions here are pure but for the
store's own appends; the cache (cache.py) keeps what they return.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from memory_worker.core.read_columns import (
    ENTRY_OVERHEAD_BYTES,
    NO_SLOT,
    TOPICS_PER_PERSONA,
    PersonaRows,
)
from memory_worker.core.vectors import int8_cosines, int8_norms, stack_int8

GROWTH = 1.0625  # ours: spare slots a vector store takes as it grows, so an append rarely copies
SPARE_MIN = 16  # ours: and at least this many (the growth copies on the fill thread, not an open)

# Reads the embeddings of these row ids: id → int8 blob (missing ids: no embedding).
LoadVectors = Callable[[Sequence[int]], Mapping[int, bytes | None]]


class Vectors:
    """One persona's int8 embeddings, a slot each, and their cosines to up to four topics.

    Append-only: a slot once written never changes (a row whose embedding may have changed
    takes a new one), so every generation of a persona's columns shares one store, and a
    thread ranking on an older generation reads what it read before. It grows with spare room
    (`GROWTH`); the cache moves the live slots into a new store (`compacted`) when dead ones
    would pass the byte bound.
    """

    def __init__(self, dims: int, capacity: int):
        self.dims = dims
        self.matrix = np.zeros((capacity, dims), dtype=np.int8)
        self.norms = np.zeros(capacity, dtype=np.float32)
        self.cosines: OrderedDict[bytes, np.ndarray] = OrderedDict()  # topic → float64 a slot
        self.used = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def nbytes(self) -> int:
        cosines = sum(c.nbytes for c in self.cosines.values())
        return self.matrix.nbytes + self.norms.nbytes + cosines

    def append(self, blobs: Sequence[bytes | None], room: int) -> np.ndarray:
        """Write these embeddings (None: a zero vector) into new slots, growing the store up to
        `room` slots if it must; returns their slot numbers."""
        block = stack_int8(blobs, self.dims)
        norms = int8_norms(block)
        with self._lock:
            start, end = self.used, self.used + len(blobs)
            if end > self.capacity:
                self._grow(max(end, min(room, int(self.capacity * GROWTH) + SPARE_MIN)))
            self.matrix[start:end] = block
            self.norms[start:end] = norms
            for topic, cos in self.cosines.items():
                cos[start:end] = int8_cosines(block, topic, norms)
            self.used = end
        return np.arange(start, end, dtype=np.int64)

    def _grow(self, capacity: int) -> None:
        """Copy into larger arrays; a reader holding the old ones still finds its slots."""
        n = self.used
        matrix = np.zeros((capacity, self.dims), dtype=np.int8)
        matrix[:n] = self.matrix[:n]
        norms = np.zeros(capacity, dtype=np.float32)
        norms[:n] = self.norms[:n]
        for topic, cos in list(self.cosines.items()):
            grown = np.zeros(capacity)
            grown[:n] = cos[:n]
            self.cosines[topic] = grown
        self.matrix, self.norms = matrix, norms

    def cosines_to(self, topic: bytes, *, keep: bool) -> np.ndarray:
        """Each slot's cosine to `topic`, kept for the next open (the last four topics) unless
        `keep` is False."""
        with self._lock:
            got = self.cosines.get(topic)
            if got is not None:
                return got
            cos = np.zeros(self.capacity)
            n = self.used
            cos[:n] = int8_cosines(self.matrix[:n], topic, self.norms[:n])
            if keep:
                self.cosines[topic] = cos
                while len(self.cosines) > TOPICS_PER_PERSONA:
                    self.cosines.popitem(last=False)
            return cos

    def forget(self, slots: np.ndarray) -> None:
        """Zero these slots (rows deleted, closed or written again): a deleted row's embedding
        does not stay in the process's memory until the next compaction."""
        with self._lock:
            self.matrix[slots] = 0
            self.norms[slots] = 0
            for cos in self.cosines.values():
                cos[slots] = 0

    def compacted(self, slots: np.ndarray, capacity: int) -> tuple[Vectors, np.ndarray]:
        """A new store holding only the slots `slots` uses (NO_SLOT entries stay), in order,
        with room for `capacity`; and `slots` renumbered into it."""
        with self._lock:
            held = slots >= 0
            live = slots[held]
            out = Vectors(self.dims, max(capacity, live.size))
            out.matrix[: live.size] = self.matrix[live]
            out.norms[: live.size] = self.norms[live]
            for topic, cos in self.cosines.items():
                moved = np.zeros(out.capacity)
                moved[: live.size] = cos[live]
                out.cosines[topic] = moved
            out.used = int(live.size)
        renumbered = np.full(slots.shape[0], NO_SLOT, dtype=np.int32)
        renumbered[held] = np.arange(live.size, dtype=np.int32)
        return out, renumbered


def vectors_of(rows: PersonaRows) -> Vectors | None:
    """The vectors held beside `rows`: the columns know them only as `HeldVectors`, and
    every store of them is one of these."""
    vectors = rows.vectors
    assert vectors is None or isinstance(vectors, Vectors)
    return vectors


def fits_whole(rows: int, dims: int, max_bytes: int) -> bool:
    """Whether a persona of `rows` open rows keeps every row's vector of `dims` bytes under
    the bound, with room to spare: then its relevance is the same whether its entry is held
    or not (a cold open may rank a few rows without reading them all)."""
    per_row = 8 * 8 + dims + 4 + 8 * TOPICS_PER_PERSONA  # columns, slot, vector, cosines
    return 2 * (ENTRY_OVERHEAD_BYTES + rows * per_row) <= max_bytes


def slots_allowed(rows: PersonaRows, dims: int, max_bytes: int) -> int:
    """How many vector slots (of `dims` bytes, with a norm and every topic's cosine beside
    each) an entry of `rows` may hold under the bound; its newest rows up to that many get
    vectors."""
    per_slot = dims + 4 + 8 * TOPICS_PER_PERSONA
    return max(0, (max_bytes - rows.base_bytes) // per_slot)


def first_slotted(rows: PersonaRows, dims: int, max_bytes: int) -> int:
    """The position of the oldest row the bound lets hold a vector (rows sort by id)."""
    return len(rows) - min(len(rows), slots_allowed(rows, dims, max_bytes))


def pending(rows: PersonaRows, max_bytes: int) -> bool:
    """Whether some row the bound lets hold a vector has none yet: a fill on the caller's
    path left it for the fill thread (`with_vectors(..., spare_only=True)`)."""
    if rows.vectors is None or rows.slots is None:
        return False
    start = first_slotted(rows, rows.vectors.dims, max_bytes)
    return bool(np.any(rows.slots[start:] < 0))


def held_cosines(
    rows: PersonaRows, topic: bytes, at: np.ndarray, keep: bool, max_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """The cosines of the rows at `at` from the vectors held (0 where none is), and which
    of them still wait for their vector (`pending`). `keep`: the topic's cosines stay in the
    store for the next open (its size grows: the cache counts it again)."""
    vectors, slots = vectors_of(rows), rows.slots
    assert vectors is not None and slots is not None
    wanted = slots[at]
    held = wanted >= 0
    out = np.zeros(wanted.shape[0])
    if keep:
        cos = vectors.cosines_to(topic, keep=True)
        out[held] = cos[wanted[held]]
    else:  # a vector seen once (a message): only the rows asked about
        some = wanted[held]
        out[held] = int8_cosines(vectors.matrix[some], topic, vectors.norms[some])
    return out, ~held & (at >= first_slotted(rows, vectors.dims, max_bytes))


def cosines_read(ids: np.ndarray, load: LoadVectors, topic: bytes) -> np.ndarray:
    """The cosine to `topic` of these rows' embeddings, read by id."""
    found = load(ids.tolist())
    return int8_cosines(stack_int8([found.get(int(i)) for i in ids], len(topic)), topic)


def with_vectors(
    rows: PersonaRows, load: LoadVectors, max_bytes: int, *, spare_only: bool = False
) -> PersonaRows:
    """`rows` with a vector for each of its newest rows that fit the bound: the slots it has
    kept, the rest loaded into its store (or a compacted copy).

    `spare_only` (a room open's own catch-up): vectors go only into the store's spare slots;
    if they do not fit there, or the store is due for compaction, they are left for the fill
    thread (`pending`) — growing or compacting copies every vector the persona holds, which
    is no work for an open to wait on."""
    vectors = vectors_of(rows)
    assert vectors is not None
    allowed = slots_allowed(rows, vectors.dims, max_bytes)
    start = len(rows) - min(len(rows), allowed)
    if rows.slots is not None:
        slots = rows.slots.copy()
    else:
        slots = np.full(len(rows), NO_SLOT, dtype=np.int32)
    slots[:start] = NO_SLOT  # older than the newest that fit: relevance 0, cold or warm
    need = start + np.flatnonzero(slots[start:] == NO_SLOT)
    live = int(np.count_nonzero(slots >= 0))
    dead = vectors.used - live
    compact = vectors.used + need.size > allowed or dead > (live + need.size) // 4 + 64
    if spare_only and (compact or vectors.used + need.size > vectors.capacity):
        need = need[:0]  # left pending for the fill thread
    elif compact:  # past the bound, or a quarter dead (rows written elsewhere took new slots)
        wanted = live + need.size
        room = min(allowed, int(wanted * GROWTH) + SPARE_MIN)
        vectors, slots = vectors.compacted(slots, room)
    if need.size:
        found = load(rows.ids[need].tolist())
        blobs = [found.get(int(i)) for i in rows.ids[need]]
        slots[need] = vectors.append(blobs, room=allowed)
    return replace(rows, slots=slots, vectors=vectors)
