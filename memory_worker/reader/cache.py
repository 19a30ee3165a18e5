"""The reader's per-process cache of ranking columns, bounded in bytes, checked at every open.

Opening a room ranks every row a persona may see, and fetching 100,000 rows into Python costs
more than the whole open should. The columns ranking needs (id, whom, kind, importance, when
last recalled, length) change only when a row is added, closed, deleted or touched, and every
such write bumps the persona's counter in `persona_memory_versions` (database triggers), with
a random stamp. Each open reads that version (counter and stamp) and the store's id; when the
version moved, the persona's change log (`persona_memory_changes`, the same triggers) names
the rows written since the version held, and only those are read again
(`PersonaRows.patched`). A process further behind than the log reaches reads them all.

Entries are per store (`Key`): a store restored, remade or replaced at the same url is
another id or another history (its stamps), never taken for the one held (`enter`).

One entry per persona, shared by every audience: a private chat with Dan and one with Cara
select different rows of the same columns (`groups`), so world rows and vectors are held once.
A room with a topic needs each row's embedding: they live in one append-only int8 store per
persona (`Vectors`, 768 bytes a row), loaded the first time a topic room opens, with the
cosines to each topic beside them, one per slot. A row written elsewhere — new, touched or
re-embedded — takes a fresh slot with its embedding read again; the slots of rows nobody
wrote are kept, so catching up after a write costs what the write changed, not the persona.

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
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from memory_worker.core import settings as settings_mod
from memory_worker.core.read_columns import (
    ENTRY_OVERHEAD_BYTES,
    NO_SLOT,
    TOPICS_PER_PERSONA,
    Batches,
    Key,
    PersonaRows,
    Version,
    View,
)
from memory_worker.core.rows import Row
from memory_worker.core.vectors import int8_cosines, int8_norms, stack_int8

GROWTH = 1.0625  # ours: spare slots a vector store takes as it grows, so an append rarely copies
SPARE_MIN = 16  # ours: and at least this many (the growth copies on the fill thread, not an open)
OWN_TOUCHES_KEPT = 8  # ours: a persona's touches kept to bring a read begun before them forward
WINNERS_KEPT = 256  # ours: full rows of recent winners an entry keeps, at most (then afresh)
VIEWS_KEPT = 3  # ours: audiences an entry keeps its visible rows for (`View`), the latest ones

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


def _kept_with(rows: PersonaRows, held: PersonaRows) -> PersonaRows:
    """`rows` taking what the entry held at the same version kept meanwhile (winners' rows
    remembered and views made while `rows` was being read: a fill's, say), so a put never
    throws away what an open kept since."""
    winners = {**rows.winners, **held.winners}
    for _ in range(len(winners) - WINNERS_KEPT):
        del winners[next(iter(winners))]
    views = {**held.views, **rows.views}
    while len(views) > VIEWS_KEPT:
        del views[next(iter(views))]
    return replace(rows, winners=winners, views=views)


class ReadCache:
    """An LRU of `PersonaRows` bounded in bytes, safe to share between the app's threads."""

    def __init__(self, max_bytes: int | None = None):
        self._entries: OrderedDict[Key, PersonaRows] = OrderedDict()
        self._sizes: dict[Key, int] = {}  # each entry's bytes as last counted in `bytes`
        self._stores: dict[str, str] = {}  # url → the id of the store its entries were read from
        # this process's last touches of each key: (before, after, their rows) (`put`)
        self._touches: dict[Key, deque[tuple[Version, Version, Batches]]] = {}
        self._max = max_bytes  # None: the setting, read at first use (importing reads nothing)
        self._lock = threading.Lock()
        self.bytes = 0

    @property
    def max_bytes(self) -> int:
        if self._max is None:
            self._max = settings_mod.current().read_cache_bytes
        return self._max

    def get(self, key: Key, version: Version) -> PersonaRows | None:
        """The entry if it is as fresh as `version`, else None. An entry behind only by this
        process's own touches (committed, or about to be: `expect`) is brought forward."""
        with self._lock:
            got = self._at(key, version)
            if got is not None:
                self._entries.move_to_end(key)
            return got

    def forwarded(self, key: Key, version: Version) -> bool:
        """Whether the entry is at `version`, or was brought forward to it by this process's
        own touches (`get` without its use: the LRU order stays)."""
        with self._lock:
            return self._at(key, version) is not None

    def _at(self, key: Key, version: Version) -> PersonaRows | None:
        got = self._entries.get(key)
        if got is not None and got.version != version:
            got = self._forward(key, got, version)
            if got is not None:
                self._entries[key] = got  # same size
        return got

    def previous(self, key: Key) -> PersonaRows | None:
        """Whatever entry is held, fresh or not (a refetch starts from it)."""
        with self._lock:
            return self._entries.get(key)

    def urls(self) -> list[str]:
        """The databases something is held for."""
        with self._lock:
            return sorted({k[0] for k in self._entries})

    def held(self, url: str) -> dict[str, PersonaRows]:
        """Every persona held for this database, with its entry (the sweep's list)."""
        with self._lock:
            return {k[2]: rows for k, rows in self._entries.items() if k[0] == url}

    def store_of(self, url: str) -> str | None:
        """The id of the store whose entries are held for `url` (`enter`)."""
        with self._lock:
            return self._stores.get(url)

    def enter(self, url: str, store: str) -> None:
        """The database at `url` is now the store `store` (its `store_identity`, read with the
        versions). Another id — restored from another store's backup, dropped and made anew, a
        file replaced — and everything held for `url` is let go of: it described another
        store. Only entries of the store last entered are kept (`put`)."""
        with self._lock:
            if self._stores.get(url) == store:
                return
            self._stores[url] = store
            for key in [k for k in self._entries if k[0] == url]:
                del self._entries[key]
                self._touches.pop(key, None)
                self.bytes -= self._sizes.pop(key)

    def drop(self, key: Key, rows: PersonaRows) -> None:
        """Let go of the entry of `key` if it is still `rows` (a newer one stays)."""
        with self._lock:
            if self._entries.get(key) is rows:
                del self._entries[key]
                self._touches.pop(key, None)
                self.bytes -= self._sizes.pop(key)

    def put(self, key: Key, rows: PersonaRows, *, recent: bool = True) -> None:
        """Keep `rows`. Never behind what is held: a read that began before this process's own
        touches landed (a topic's vectors loaded meanwhile, say) is brought forward by them
        and kept; one that missed another write is not kept (else the next open would miss
        and patch from the change log: 5x a warm open at 100k rows, and the vectors lost).
        Nothing is kept for a store the url no longer is (`enter`). `recent=False` (the sweep)
        keeps a held entry's place in the LRU and keeps nothing that is no longer held:
        catching up is not a use."""
        with self._lock:
            self._store(key, rows, recent)

    def _store(self, key: Key, rows: PersonaRows, recent: bool = True) -> None:
        held = key in self._entries
        if not (held or recent):
            return  # let go of while it was being caught up
        if self._stores.get(key[0]) != key[1]:
            return  # read from a store the url no longer is
        if held and self._entries[key].version.counter > rows.version.counter:
            forward = self._forward(key, rows, self._entries[key].version)
            if forward is None:
                return  # one store's counter only grows: what is held is newer
            rows = forward
        if held and self._entries[key].version == rows.version:
            rows = _kept_with(rows, self._entries[key])
        if held:
            self.bytes -= self._sizes.pop(key)
        size = rows.nbytes
        if size > self.max_bytes:
            self._entries.pop(key, None)
            self._touches.pop(key, None)
            return  # bigger than the whole bound: ranked, not kept
        self._entries[key] = rows  # a key already held keeps its place...
        if recent:
            self._entries.move_to_end(key)  # ...unless this is a use
        self._sizes[key] = size
        self.bytes += size
        self._trim()

    def _forward_rows(
        self, key: Key, version: Version, found: Mapping[int, Row], to: Version
    ) -> dict[int, Row] | None:
        """Full rows read at `version`, with this process's own touches since applied, if
        they lead exactly to `to`; None when some other write lies between."""
        out = dict(found)
        for before, after, batches in self._touches.get(key, ()):
            if version == to:
                break
            if version == before:
                for ids, _day, stamp, times in batches:
                    for i in ids.tolist():
                        if (row := out.get(i)) is not None:
                            out[i] = replace(
                                row, last_recalled=stamp, recall_count=row.recall_count + times
                            )
                version = after
        return out if version == to else None

    def _forward(self, key: Key, rows: PersonaRows, to: Version) -> PersonaRows | None:
        """`rows` with this process's own touches since its version applied, if they lead
        exactly to `to`; None when some other write lies between."""
        for before, after, batches in self._touches.get(key, ()):
            if rows.version == to:
                break
            if rows.version == before:
                rows = rows.touched(batches, after)
        return rows if rows.version == to else None

    def _trim(self) -> None:
        while self.bytes > self.max_bytes and self._entries:
            out, _ = self._entries.popitem(last=False)
            self._touches.pop(out, None)
            self.bytes -= self._sizes.pop(out)

    def _recount(self, key: Key, rows: PersonaRows) -> None:
        """`rows`' vectors grew in place (a topic's cosines): count its bytes again."""
        with self._lock:
            held = self._entries.get(key)
            if held is None:
                return
            if held is rows or (rows.vectors is not None and held.vectors is rows.vectors):
                size = held.nbytes  # rows, or what `put` brought forward from it
                self.bytes += size - self._sizes[key]
                self._sizes[key] = size
                self._trim()

    def remember(self, key: Key, version: Version, found: Mapping[int, Row]) -> None:
        """Keep the full rows of these winners, read at `version`, with the entry if it is at
        that version, or beyond it only by this process's own touches (then the rows take
        them too); else they are not kept."""
        with self._lock:
            rows = self._entries.get(key)
            if rows is None:
                return
            if rows.version != version:
                found = self._forward_rows(key, version, found, rows.version) or {}
            kept = {**rows.winners, **found}
            for _ in range(len(kept) - WINNERS_KEPT):  # the oldest kept go first
                del kept[next(iter(kept))]
            self._entries[key] = fresh = replace(rows, winners=kept)
            size = fresh.nbytes
            self.bytes += size - self._sizes[key]
            self._sizes[key] = size
            self._trim()

    def keep_view(self, key: Key, rows: PersonaRows, scope: Any, view: View) -> None:
        """Keep this audience's view with the entry, if it still holds these rows (the same
        views: a touch or the winners kept made another generation of the same rows); the
        latest VIEWS_KEPT audiences stay."""
        with self._lock:
            held = self._entries.get(key)
            if held is None or held.views is not rows.views:
                return
            held.views.pop(scope, None)
            held.views[scope] = view
            while len(held.views) > VIEWS_KEPT:
                del held.views[next(iter(held.views))]
            size = held.nbytes
            if size > self.max_bytes:
                del held.views[scope]  # past the whole bound: made again each time
                size = held.nbytes
            self.bytes += size - self._sizes[key]
            self._sizes[key] = size
            self._trim()

    def fits_whole(self, rows: int, dims: int) -> bool:
        """Whether a persona of `rows` open rows keeps every row's vector of `dims` bytes
        under the bound, with room to spare: then its relevance is the same whether its
        entry is held or not (a cold open may rank a few rows without reading them all)."""
        per_row = 8 * 8 + dims + 4 + 8 * TOPICS_PER_PERSONA  # columns, slot, vector, cosines
        return 2 * (ENTRY_OVERHEAD_BYTES + rows * per_row) <= self.max_bytes

    def slots_allowed(self, rows: PersonaRows, dims: int) -> int:
        """How many vector slots (of `dims` bytes, with a norm and every topic's cosine beside
        each) an entry of `rows` may hold under the bound; its newest rows up to that many get
        vectors."""
        per_slot = dims + 4 + 8 * TOPICS_PER_PERSONA
        return max(0, (self.max_bytes - rows.base_bytes) // per_slot)

    def relevance(
        self,
        key: Key,
        rows: PersonaRows,
        topic: bytes,
        load: LoadVectors,
        at: np.ndarray,
        *,
        keep: bool = True,
    ) -> np.ndarray:
        """The cosine to `topic` of the rows at positions `at` (0 for rows whose vectors the
        bound left out); the cosines are kept for the next open unless `keep` is False. A row
        still waiting for its vector (`pending`) is measured on its vector read by id."""
        if rows.vectors is None or rows.slots is None or rows.vectors.dims != len(topic):
            fit = min(len(rows), self.slots_allowed(rows, len(topic)))
            empty = Vectors(len(topic), fit)
            rows = self.fill(key, replace(rows, slots=None, vectors=empty), load)
        out, waiting = self._held_cosines(key, rows, topic, at, keep)
        if waiting.any():
            dims = len(topic)
            ids = rows.ids[at[waiting]]
            found = load(ids.tolist())
            out[waiting] = int8_cosines(stack_int8([found.get(int(i)) for i in ids], dims), topic)
        return out

    def held_relevance(
        self, key: Key, rows: PersonaRows, topic: bytes, at: np.ndarray, *, keep: bool = True
    ) -> np.ndarray | None:
        """`relevance` from the vectors held alone (a warm open reading nothing but its
        context): None when a row at `at` would need its vector read first."""
        vectors = vectors_of(rows)
        if vectors is None or rows.slots is None or vectors.dims != len(topic):
            return None
        out, waiting = self._held_cosines(key, rows, topic, at, keep)
        return None if waiting.any() else out

    def _held_cosines(
        self, key: Key, rows: PersonaRows, topic: bytes, at: np.ndarray, keep: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """The cosines of the rows at `at` from the vectors held (0 where none is), and which
        of them still wait for their vector (`pending`)."""
        vectors, slots = vectors_of(rows), rows.slots
        assert vectors is not None and slots is not None
        wanted = slots[at]
        held = wanted >= 0
        out = np.zeros(wanted.shape[0])
        if keep:
            cos = vectors.cosines_to(topic, keep=True)
            self._recount(key, rows)
            out[held] = cos[wanted[held]]
        else:  # a vector seen once (a message): only the rows asked about
            some = wanted[held]
            out[held] = int8_cosines(vectors.matrix[some], topic, vectors.norms[some])
        return out, ~held & (at >= self._first_slotted(rows, vectors.dims))

    def _first_slotted(self, rows: PersonaRows, dims: int) -> int:
        """The position of the oldest row the bound lets hold a vector (rows sort by id)."""
        return len(rows) - min(len(rows), self.slots_allowed(rows, dims))

    def pending(self, rows: PersonaRows) -> bool:
        """Whether some row the bound lets hold a vector has none yet: a fill on the caller's
        path left it for the fill thread (`fill(..., spare_only=True)`)."""
        if rows.vectors is None or rows.slots is None:
            return False
        start = self._first_slotted(rows, rows.vectors.dims)
        return bool(np.any(rows.slots[start:] < 0))

    def fill(
        self,
        key: Key,
        rows: PersonaRows,
        load: LoadVectors,
        *,
        recent: bool = True,
        spare_only: bool = False,
    ) -> PersonaRows:
        """`rows` with a vector for each of its newest rows that fit the bound — the slots it
        has kept, the rest loaded into its store (or a compacted copy) — kept in the cache
        (`put`'s `recent`). Rows that never needed vectors are kept as they are.

        `spare_only` (a room open's own catch-up): vectors go only into the store's spare
        slots; if they do not fit there, or the store is due for compaction, they are left
        for the fill thread (`pending`) — growing or compacting copies every vector the
        persona holds, which is no work for an open to wait on."""
        vectors = vectors_of(rows)
        if vectors is None:
            self.put(key, rows, recent=recent)
            return rows
        allowed = self.slots_allowed(rows, vectors.dims)
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
        out = replace(rows, slots=slots, vectors=vectors)
        self.put(key, out, recent=recent)
        return out

    def touched(
        self, url: str, store: str, moves: Mapping[str, tuple[Version, Version, Batches]]
    ) -> None:
        """Apply this process's own touches: `moves[persona]` is its version before and after
        them and its rows they touched. An entry that was not at `before` (counter and stamp)
        missed someone else's write: it stays as it is, stale, and the next open brings it up
        to date from the change log."""
        with self._lock:
            self._note(url, store, moves)
            for persona, (before, after, batches) in moves.items():
                key = (url, store, persona)
                rows = self._entries.get(key)
                if rows is not None and rows.version == before:
                    self._entries[key] = rows.touched(batches, after)  # same size

    def expect(
        self, url: str, store: str, moves: Mapping[str, tuple[Version, Version, Batches]]
    ) -> None:
        """This process's own touches, written and about to commit: an open that reads the
        store after the commit and before `touched` brings the entry forward by them (`get`)
        instead of reading the touched rows again. Kept only as a way forward: if the commit
        fails, no version ever matches `after` (its stamp is the write's own)."""
        with self._lock:
            self._note(url, store, moves)

    def _note(
        self, url: str, store: str, moves: Mapping[str, tuple[Version, Version, Batches]]
    ) -> None:
        for persona, move in moves.items():
            key = (url, store, persona)
            if key in self._entries:
                kept = self._touches.setdefault(key, deque(maxlen=OWN_TOUCHES_KEPT))
                if not kept or kept[-1][1] != move[1]:  # the same touch, noted once
                    kept.append(move)

    def clear(self) -> None:
        with self._lock:
            self._touches.clear()
            self._entries.clear()
            self._sizes.clear()
            self._stores.clear()
            self.bytes = 0
