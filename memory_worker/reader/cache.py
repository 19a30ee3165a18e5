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

Three plain parts under one lock: the byte-bounded LRU (`lru.ByteLRU`), bringing an entry to
a newer version by this process's own touches (`forward`, pure functions), and the vector
slots (`vectors`). `ReadCache` holds them together: which store each url is, and the touches.

A stale entry could only mis-rank, never leak: the reader loads the winners' full rows afresh
and passes each through `visible_memories` again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from memory_worker.core import settings as settings_mod
from memory_worker.core.read_columns import Key, PersonaRows, Version, Versions, View
from memory_worker.core.rows import Row
from memory_worker.reader import vectors as slots
from memory_worker.reader.forward import (
    OWN_TOUCHES_KEPT,
    VIEWS_KEPT,
    Move,
    forward,
    forward_rows,
    kept_with,
    with_winners,
)
from memory_worker.reader.lru import ByteLRU
from memory_worker.reader.vectors import LoadVectors, Vectors, vectors_of

__all__ = ["LoadVectors", "ReadCache", "Vectors", "vectors_of"]

Blob = bytes  # a topic's vector (`ReadCache.bytes` is the bytes held, in its class's scope)


@dataclass(frozen=True)
class Held:
    """What an open's plan starts from (`ReadCache.at`): each persona's entry at its version
    and whatever entry is held for it (None, None: nothing), and the cache's bound."""

    entries: dict[str, tuple[PersonaRows | None, PersonaRows | None]]
    max_bytes: int


class ReadCache:
    """The read cache's entries by `Key`, safe to share between the app's threads."""

    def __init__(self, max_bytes: int | None = None):
        self._max = max_bytes  # None: the setting, read at first use (importing reads nothing)
        # this process's last touches of each key: (before, after, their rows) (`_note`)
        self._touches: dict[Key, deque[Move]] = {}
        self._lru: ByteLRU[Key, PersonaRows] | None = None  # made at first use, with the bound
        self._stores: dict[str, str] = {}  # url → the id of the store its entries were read from
        self._lock = threading.RLock()  # `at` and `keep` call the others

    @property
    def max_bytes(self) -> int:
        if self._max is None:
            self._max = settings_mod.current().read_cache_bytes
        return self._max

    @property
    def bytes(self) -> int:
        return self._entries.bytes

    @property
    def _entries(self) -> ByteLRU[Key, PersonaRows]:
        if self._lru is None:
            self._lru = ByteLRU(self.max_bytes)
        return self._lru

    def _forget(self, gone: list[Key]) -> None:
        """The touches kept beside entries the LRU let go of go with them."""
        for key in gone:
            self._touches.pop(key, None)

    # --- entries ---------------------------------------------------------------------------

    def get(self, key: Key, version: Version) -> PersonaRows | None:
        """The entry if it is as fresh as `version`, else None. An entry behind only by this
        process's own touches (committed, or about to be: `expect`) is brought forward."""
        with self._lock:
            got = self._at(key, version)
            if got is not None:
                self._entries.use(key)
            return got

    def forwarded(self, key: Key, version: Version) -> bool:
        """Whether the entry is at `version`, or was brought forward to it by this process's
        own touches (`get` without its use: the LRU order stays)."""
        with self._lock:
            return self._at(key, version) is not None

    def _at(self, key: Key, version: Version) -> PersonaRows | None:
        got = self._entries.peek(key)
        if got is not None and got.version != version:
            got = forward(got, self._touches.get(key, ()), version)
            if got is not None:
                self._entries.replace(key, got)  # same size
        return got

    def previous(self, key: Key) -> PersonaRows | None:
        """Whatever entry is held, fresh or not (a refetch starts from it)."""
        with self._lock:
            return self._entries.peek(key)

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
                self._entries.pop(key)
                self._touches.pop(key, None)

    def at(
        self, url: str, versions: Versions, personas: Sequence[str], *, enter: bool
    ) -> Held | None:
        """What an open's plan starts from, in one call: each persona's entry if it is at its
        version in `versions` (as `get`), and whatever entry is held for it (as `previous`).
        `enter`: the store is `versions.store` from now on (`enter`); else None when the
        entries held for `url` are another store's."""
        with self._lock:
            if enter:
                self.enter(url, versions.store)
            elif self._stores.get(url) != versions.store:
                return None
            out = {}
            for p in personas:
                key = (url, versions.store, p)
                fresh = self._at(key, versions[p])
                if fresh is not None:
                    self._entries.use(key)
                out[p] = (fresh, fresh or self._entries.peek(key))
            return Held(out, self.max_bytes)

    def keep(
        self,
        url: str,
        store: str,
        *,
        put: Mapping[str, PersonaRows],
        views: Sequence[tuple[str, PersonaRows, Any, View]],
        grown: Mapping[str, PersonaRows],
        remember: Mapping[str, tuple[Version, Mapping[int, Row]]],
    ) -> None:
        """What an open's plan leaves the cache, in one call: entries to keep (`put`), views
        to keep, entries whose vectors grew (their bytes counted again), and winners' rows to
        keep (`remember`), by persona."""
        with self._lock:
            for p, rows in put.items():
                self.put((url, store, p), rows, recent=True)
            for p, rows, scope, view in views:
                self._keep_view((url, store, p), rows, scope, view)
            for p, rows in grown.items():
                self._recount((url, store, p), rows)
            for p, (version, found) in remember.items():
                self.remember((url, store, p), version, found)

    def drop(self, key: Key, rows: PersonaRows) -> None:
        """Let go of the entry of `key` if it is still `rows` (a newer one stays)."""
        with self._lock:
            if self._entries.peek(key) is rows:
                self._entries.pop(key)
                self._touches.pop(key, None)

    def put(self, key: Key, rows: PersonaRows, *, recent: bool = True) -> None:
        """Keep `rows`. Never behind what is held: a read that began before this process's own
        touches landed (a topic's vectors loaded meanwhile, say) is brought forward by them
        and kept; one that missed another write is not kept (else the next open would miss
        and patch from the change log: 5x a warm open at 100k rows, and the vectors lost).
        Nothing is kept for a store the url no longer is (`enter`). `recent=False` (the sweep)
        keeps a held entry's place in the LRU and keeps nothing that is no longer held:
        catching up is not a use. An entry bigger than the whole bound is ranked, not kept."""
        with self._lock:
            held = self._entries.peek(key)
            if held is None and not recent:
                return  # let go of while it was being caught up
            if self._stores.get(key[0]) != key[1]:
                return  # read from a store the url no longer is
            if held is not None and held.version.counter > rows.version.counter:
                ahead = forward(rows, self._touches.get(key, ()), held.version)
                if ahead is None:
                    return  # one store's counter only grows: what is held is newer
                rows = ahead
            if held is not None and held.version == rows.version:
                rows = kept_with(rows, held)
            self._forget(self._entries.set(key, rows, rows.nbytes, recent=recent))

    def remember(self, key: Key, version: Version, found: Mapping[int, Row]) -> None:
        """Keep the full rows of these winners, read at `version`, with the entry if it is at
        that version, or beyond it only by this process's own touches (then the rows take
        them too); else they are not kept."""
        with self._lock:
            rows = self._entries.peek(key)
            if rows is None:
                return
            if rows.version != version:
                touches = self._touches.get(key, ())
                found = forward_rows(found, version, touches, rows.version) or {}
            fresh = with_winners(rows, found)
            self._entries.replace(key, fresh)
            self._forget(self._entries.resize(key, fresh.nbytes))

    def _keep_view(self, key: Key, rows: PersonaRows, scope: Any, view: View) -> None:
        """Keep this audience's view with the entry, if it still holds these rows (the same
        views: a touch or the winners kept made another generation of the same rows); the
        latest VIEWS_KEPT audiences stay, and none past the whole bound."""
        held = self._entries.peek(key)
        if held is None or held.views is not rows.views:
            return
        held.views.pop(scope, None)
        held.views[scope] = view
        while len(held.views) > VIEWS_KEPT:
            del held.views[next(iter(held.views))]
        if held.nbytes > self.max_bytes:
            del held.views[scope]  # past the whole bound: made again each time
        self._forget(self._entries.resize(key, held.nbytes))

    def _recount(self, key: Key, rows: PersonaRows) -> None:
        """`rows`' vectors grew in place (a topic's cosines): count its bytes again."""
        held = self._entries.peek(key)
        if held is None:
            return
        if held is rows or (rows.vectors is not None and held.vectors is rows.vectors):
            # rows, or what `put` brought forward from it
            self._forget(self._entries.resize(key, held.nbytes))

    # --- this process's own touches ----------------------------------------------------------

    def touched(self, url: str, store: str, moves: Mapping[str, Move]) -> None:
        """Apply this process's own touches: `moves[persona]` is its version before and after
        them and its rows they touched. An entry that was not at `before` (counter and stamp)
        missed someone else's write: it stays as it is, stale, and the next open brings it up
        to date from the change log."""
        with self._lock:
            self._note(url, store, moves)
            for persona, (before, after, batches) in moves.items():
                key = (url, store, persona)
                rows = self._entries.peek(key)
                if rows is not None and rows.version == before:
                    self._entries.replace(key, rows.touched(batches, after))  # same size

    def expect(self, url: str, store: str, moves: Mapping[str, Move]) -> None:
        """This process's own touches, written and about to commit: an open that reads the
        store after the commit and before `touched` brings the entry forward by them (`get`)
        instead of reading the touched rows again. Kept only as a way forward: if the commit
        fails, no version ever matches `after` (its stamp is the write's own)."""
        with self._lock:
            self._note(url, store, moves)

    def _note(self, url: str, store: str, moves: Mapping[str, Move]) -> None:
        for persona, move in moves.items():
            key = (url, store, persona)
            if key in self._entries:
                kept = self._touches.setdefault(key, deque(maxlen=OWN_TOUCHES_KEPT))
                if not kept or kept[-1][1] != move[1]:  # the same touch, noted once
                    kept.append(move)

    # --- vectors under the bound (vectors.py) ----------------------------------------------

    def pending(self, rows: PersonaRows) -> bool:
        """`vectors.pending` under this cache's bound."""
        return slots.pending(rows, self.max_bytes)

    def relevance(
        self,
        key: Key,
        rows: PersonaRows,
        topic: Blob,
        load: LoadVectors,
        at: np.ndarray,
        *,
        keep: bool = True,
    ) -> np.ndarray:
        """The cosine to `topic` of the rows at positions `at` (0 for rows whose vectors the
        bound left out); the cosines are kept for the next open unless `keep` is False. A row
        still waiting for its vector (`pending`) is measured on its vector read by id."""
        if rows.vectors is None or rows.slots is None or rows.vectors.dims != len(topic):
            fit = min(len(rows), slots.slots_allowed(rows, len(topic), self.max_bytes))
            empty = Vectors(len(topic), fit)
            rows = self.fill(key, replace(rows, slots=None, vectors=empty), load)
        out, waiting = slots.held_cosines(rows, topic, at, keep, self.max_bytes)
        if keep:
            with self._lock:
                self._recount(key, rows)
        if waiting.any():
            out[waiting] = slots.cosines_read(rows.ids[at[waiting]], load, topic)
        return out

    def fill(
        self,
        key: Key,
        rows: PersonaRows,
        load: LoadVectors,
        *,
        recent: bool = True,
        spare_only: bool = False,
    ) -> PersonaRows:
        """`rows` with a vector for each of its newest rows that fit the bound
        (`vectors.with_vectors`), kept in the cache (`put`'s `recent`). Rows that never needed
        vectors are kept as they are."""
        if rows.vectors is not None:
            rows = slots.with_vectors(rows, load, self.max_bytes, spare_only=spare_only)
        self.put(key, rows, recent=recent)
        return rows

    def clear(self) -> None:
        with self._lock:
            self._touches.clear()
            self._entries.clear()
            self._stores.clear()
