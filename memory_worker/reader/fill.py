"""The read cache's fill, off the caller's path: a cold room open answers first, fills later.

A room open for a persona this process does not hold (its first open, after the LRU let it
go, or too far behind the change log) answers from the persona's pack, or from the rows its
audience can see (cache_loader.read_plan). The persona's shared entry — every open row, for
every audience, and the vectors of a room's topic — is then read here, on one daemon thread
per process, so the next open of any of its rooms is warm. Importing starts nothing; the
thread starts at the first request, and a forked child starts its own.

The fill never slows the open it follows: an open asks for it as it returns, and the fill
waits at each step while any room open of this process is in flight (threads.OPENS). Its
work is here beside its thread: the entry read whole (`whole_entry`), and the persona's pack
written when the one kept lags (`keep_pack`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
from sqlalchemy import Connection

from memory_worker.core.read_columns import (
    NEVER_WRITTEN,
    Key,
    PersonaRows,
    Version,
    packed,
    unpacked,
)
from memory_worker.core.rows import Row
from memory_worker.reader import cache_loader
from memory_worker.reader.cache_loader import (
    catch_up_store,
    columns_of,
    held_entry,
    patched_entry,
    vector_loader,
)
from memory_worker.reader.threads import OPENS, QueueWorker
from memory_worker.reader.vectors import vectors_of
from memory_worker.storage import read_packs, read_path, store

log = logging.getLogger(__name__)


Request = tuple[str, str, bytes | None]  # (database url, persona, a room topic's vector)


# What a cold open read of a persona's winners, and at which version: the fill keeps them.
Winners = Mapping[str, tuple[Version, Mapping[int, Row]]]


Fill = Callable[[str, list[str], list[bytes], Winners], object]
Taken = tuple[str, list[str], list[bytes], Winners]  # what one fill is handed: Fill's arguments


class Filler(QueueWorker[Taken]):
    """Runs `fill(url, personas, topics, winners)` on a daemon thread for what was requested."""

    name = "memory-read-fill"

    def __init__(self, fill: Fill):
        super().__init__()
        self._fill = fill
        # Fills that raised (`reader.metrics`): a persona whose fill keeps failing opens cold
        # every time. Each error type's first is logged with its traceback, the rest by count.
        self.failures = 0
        self._logged: set[type[BaseException]] = set()

    def _setup(self) -> None:
        self._pending: dict[tuple[str, str], set[bytes]] = {}
        self._winners: dict[tuple[str, str], tuple[Version, dict[int, Row]]] = {}

    def request(
        self, url: str, personas: list[str], topic: bytes | None, winners: Winners | None = None
    ) -> None:
        """Fill these personas' entries (and their cosines to `topic`) soon, keeping with
        them the `winners` rows an open read (the rows of its blocks)."""
        self.start()
        with self._cv:
            for p in personas:
                topics = self._pending.setdefault((url, p), set())
                if topic is not None:
                    topics.add(topic)
            for p, (version, rows) in (winners or {}).items():
                held = self._winners.get((url, p))
                if held is not None and held[0] == version:
                    rows = {**held[1], **rows}
                self._winners[(url, p)] = (version, dict(rows))
            self._cv.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything requested so far is filled (or given up). True if idle."""
        return self._idle(lambda: self._pending, timeout)

    def _waiting(self) -> bool:
        return bool(self._pending)

    def _take(self) -> Taken:
        """One database's requests: (url, personas, topics, winners)."""
        url = next(iter(self._pending))[0]
        mine = {k: v for k, v in self._pending.items() if k[0] == url}
        for k in mine:
            del self._pending[k]
        winners = {k[1]: self._winners.pop(k) for k in mine if k in self._winners}
        topics = sorted({t for v in mine.values() for t in v})
        return url, sorted(p for _, p in mine), topics, winners

    def _work(self, batch: Taken) -> None:
        try:
            self._fill(*batch)
        except Exception as exc:  # noqa: BLE001 — a fill must never take the thread down
            self.failures += 1
            first = type(exc) not in self._logged  # its traceback once, then its count
            self._logged.add(type(exc))
            log.warning(
                "read cache fill failed (%s, %d so far); the next open reads",
                type(exc).__name__,
                self.failures,
                exc_info=first,
            )


PACK_BEHIND_MAX = 256  # ours: versions a kept pack may lag before it is written again...


PACK_BEHIND_MIN = 16  # ours: ...or fewer for a small persona, whose pack costs little to write


def _fill(url: str, personas: list[str], topics: list[bytes], winners: Winners) -> None:
    """The fill thread's work: every open row of these personas into the read
    cache, with their vectors and cosines to the topics their cold opens ranked against and
    the winners' rows those opens read, and their packs kept up to date. Before each step it
    waits while a room open is in flight."""
    for p in personas:
        OPENS.wait_idle()
        with store.engine(url).connect() as conn:
            versions = read_path.versions(conn, [p])
            cache_loader.READ_CACHE.enter(url, versions.store)
            key = (url, versions.store, p)
            rows = held_entry(conn, key, versions[p]) or whole_entry(conn, p, versions[p])
            load = vector_loader(conn, p, len(rows), between=OPENS.wait_idle)
            rows = cache_loader.READ_CACHE.fill(key, rows, load)
            if p in winners:
                cache_loader.READ_CACHE.remember(key, *winners[p])
            for topic in topics:
                OPENS.wait_idle()
                every = np.arange(len(rows), dtype=np.int64)
                cache_loader.READ_CACHE.relevance(key, rows, topic, load, every, keep=True)
                rows = cache_loader.READ_CACHE.previous(key) or rows
        keep_pack(url, key, rows)
    # A write that landed while this read (the open's own touch, say) found no entry to update:
    # catching up now, after the entry is in, cannot miss it.
    catch_up_store(url, personas)


FILLS = Filler(_fill)


def whole_entry(conn: Connection, persona: str, version: Version) -> PersonaRows:
    """Every open row of `persona` at `version`: from its pack and the rows changed since, or
    read row by row (in parts, stepping aside for room opens between them)."""
    pack = read_packs.packs(conn, [persona], None).get(persona)
    if pack is not None:
        caught = patched_entry(conn, persona, unpacked(pack.columns, pack.version), version)
        if caught is not None:
            return caught[0]
    return columns_of(read_path.open_rows(conn, [persona], between=OPENS.wait_idle), version)


NO_PACK: read_packs.Kept = (None, {})  # `read_packs.kept` of a persona with nothing kept


def keep_pack(url: str, key: Key, rows: PersonaRows, kept: read_packs.Kept | None = None) -> None:
    """Write the persona's pack from its entry when the one kept (`kept`, read here if not
    given) is missing or lags past its slack, and each topic's cosines the entry holds
    exactly when those kept are missing or lag.

    What is written is the persona's version now: an entry the store moved past while it was
    read (a fresh process's own touch commits during its fill, at 100k rows every time) is
    brought up to it from the change log inside the write, and the cosines of the rows
    written since are left out (an open reads those by id). So a busy persona is packed too,
    and nothing kept ever describes a row a delete has already removed."""
    persona = key[2]
    if rows.version == NEVER_WRITTEN:
        return
    if kept is None:
        with store.engine(url).connect() as conn:
            kept = read_packs.kept(conn, [persona]).get(persona, NO_PACK)
    slack = _pack_slack(len(rows))

    def lagging(version: Version | None) -> bool:
        return version is None or not 0 <= rows.version.counter - version.counter < slack

    pack_due = lagging(kept[0])
    topics_due = {
        topic: cos
        for topic, cos in _exact_cosines(rows).items()
        if lagging(kept[1].get(read_packs.topic_key(topic)))
    }
    if not (pack_due or topics_due):
        return
    OPENS.wait_idle()
    blob = packed(rows) if pack_due else b""
    ids = np.ascontiguousarray(rows.ids, dtype="<i8")
    with store.transaction(url) as conn:
        now = read_path.versions(conn, [persona])
        if now.store != key[1]:
            return
        version, count, unchanged = now[persona], len(rows), None
        if version != rows.version:
            bare = replace(rows, slots=None, vectors=None)  # the held vectors stay untouched
            caught = patched_entry(conn, persona, bare, version)
            if caught is None:
                return  # the log no longer reaches the entry: the next fill packs
            blob, count = packed(caught[0]) if pack_due else b"", len(caught[0])
            changed = np.fromiter(caught[1], dtype=np.int64, count=len(caught[1]))
            unchanged = ~np.isin(ids, changed)
        if pack_due:
            read_packs.write_pack(conn, persona, version, count, blob)
        if topics_due:
            if unchanged is not None:
                topics_due = {t: _taken(cos, unchanged) for t, cos in topics_due.items()}
            kept_ids = ids if unchanged is None else ids[unchanged]
            read_packs.write_cosines(conn, persona, version, kept_ids.tobytes(), topics_due)


def _taken(cosines: bytes, keep: np.ndarray) -> bytes:
    """Those of a topic's cosines (float64, in the entry's order) at `keep`."""
    taken: bytes = np.frombuffer(cosines, dtype="<f8")[keep].tobytes()
    return taken


def _pack_slack(rows: int) -> int:
    """How many versions a pack of this many rows may lag: re-reading that many changed
    rows costs a cold open less than the floor's fraction it is allowed."""
    return max(PACK_BEHIND_MIN, min(PACK_BEHIND_MAX, rows // 64))


def _exact_cosines(rows: PersonaRows) -> dict[bytes, bytes]:
    """Each topic's cosine of every row, in the entry's order, when every row holds its
    vector (an entry past the byte bound ranks some on none: not the store's to keep)."""
    vectors = vectors_of(rows)
    if vectors is None or rows.slots is None or bool(np.any(rows.slots < 0)):
        return {}
    return {
        topic: np.ascontiguousarray(cos[rows.slots], dtype="<f8").tobytes()
        for topic, cos in vectors.cosines.items()
    }
