"""The read cache on a real SQLite file: the block is the same whether the cache is cold, warm
or was made stale by another process; memory stays under its byte bound; audiences of one
persona share one entry; a persona bigger than the bound ranks on the vectors that fit."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, delete, event, insert, select, update

from memory_worker import app_side, controls
from memory_worker.core import read_columns as read_cache_mod
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.errors import ConfigError
from memory_worker.core.read_columns import (
    ROW_OVERHEAD_BYTES,
    PersonaRows,
    Version,
    unpacked,
)
from memory_worker.core.rows import Row
from memory_worker.core.vectors import quantise
from memory_worker.reader import Block, build_block, cache_loader, fill, threads
from memory_worker.reader.cache import ReadCache, Vectors
from memory_worker.storage import memories, read_packs, read_path, store
from tests.examples import examples

NOW = "2026-12-01T12:00:00+00:00"
DAN, CARA = 42, 17
DIMS = 16  # small vectors: the bound is about rows, not the embedding model

pytestmark = pytest.mark.store


def opened(persona: str, present: set[int], room: str, **kw: Any) -> Block:
    """`build_block`, then its cold open's fill landed (fill.py): this file watches
    what the cache holds between opens."""
    block = build_block(persona, present, room, **kw)
    assert fill.FILLS.wait(30)
    return block


def vector(rng: np.random.Generator) -> bytes:
    return quantise(rng.normal(size=DIMS))


@pytest.fixture
def store_rows(db: Engine) -> np.random.Generator:
    """Warren knows 120 things about Dan, 60 about Cara and 40 about the world; Nolan a few.
    Rooms: a private chat with each, each also with a topic."""
    rng = np.random.default_rng(3)
    with store.transaction() as c:
        for uid, name in ((DAN, "Dan"), (CARA, "Cara")):
            app_side.add_user(c, uid, name)
        for slug in ("warren", "nolan"):
            app_side.add_persona(c, slug, slug.title())
        for room, who in (("dm", DAN), ("dm-cara", CARA), ("topic", DAN), ("topic-cara", CARA)):
            app_side.add_room(c, room, "private", [f"u:{who}", "warren", "nolan"])
        for room in ("topic", "topic-cara"):
            c.execute(
                update(t.rooms).where(t.rooms.c.id == room).values(topic_embedding=vector(rng))
            )
        rows = []
        for persona, subject, n in (
            ("warren", "u:42", 120),
            ("warren", "u:17", 60),
            ("warren", "world", 40),
            ("nolan", "u:42", 30),
        ):
            rows += [new_row(rng, persona, subject, i) for i in range(n)]
        c.execute(insert(t.persona_memory), rows)
    cache_loader.READ_CACHE.clear()
    return rng


def new_row(rng: np.random.Generator, persona: str, subject: str, i: int) -> dict:
    kind = ["fact", "preference", "event", "relationship", "open_loop"][i % 5]
    return {
        "persona": persona,
        "subject": subject,
        "counterpart": None,
        "witnessed": json.dumps([DAN]),
        "room_id": "dm",
        "kind": kind,
        "text": f"{subject} said thing {i} " + "x" * int(rng.integers(10, 80)),
        "importance": int(rng.integers(3, 11)),
        "evidence": "[1]",
        "created": f"2026-{1 + i % 11:02d}-{1 + i % 27:02d}T10:00:00+00:00",
        "embedding": vector(rng),
    }


def texts() -> list[str]:
    """Every block of both personas in every room, with and without the cache."""
    out = []
    for room, who in (("dm", DAN), ("dm-cara", CARA), ("topic", DAN), ("topic-cara", CARA)):
        for persona in ("warren", "nolan"):
            out.append(opened(persona, {who}, room, now=NOW, touch=False).text)
    return out


def held(persona: str):  # type: ignore[no-untyped-def]
    """The persona's entry once the cold opens' fills have landed (fill.py)."""
    assert fill.FILLS.wait(30)
    return cache_loader.READ_CACHE.held(settings_mod.current().database_url)[persona]


def row_vectors(entry: PersonaRows) -> np.ndarray:
    """Each row's int8 vector as the entry holds it (zeros: none held)."""
    assert entry.vectors is not None and entry.slots is not None
    out = np.zeros((len(entry), entry.vectors.dims), dtype=np.int8)
    has = entry.slots >= 0
    out[has] = entry.vectors.matrix[entry.slots[has]]
    return out


def row_cosines(entry: PersonaRows) -> dict[bytes, np.ndarray]:
    """Each kept topic's cosine of each row (0: no vector held)."""
    assert entry.vectors is not None and entry.slots is not None
    has = entry.slots >= 0
    out = {}
    for topic, cos in entry.vectors.cosines.items():
        out[topic] = np.zeros(len(entry))
        out[topic][has] = cos[entry.slots[has]]
    return out


def cold() -> list[str]:
    cache_loader.READ_CACHE.clear()
    return texts()


@pytest.fixture(params=["a small persona", "a big persona's ways"])
def ways(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Rank as a persona of a few hundred rows is ranked, and as one of many thousands is:
    the views kept per audience and the per-(group, kind) passes of the take."""
    if request.param != "a small persona":
        from memory_worker.core import ranking

        monkeypatch.setattr(cache_loader, "VIEWS_FROM_ROWS", 0)
        monkeypatch.setattr(read_cache_mod, "VIEWS_FROM_ROWS", 0)
        monkeypatch.setattr(ranking, "SORT_ALL_UP_TO", 0)
    return str(request.param)


@pytest.mark.parametrize(
    "change", ["a new row", "a closed row", "a deleted row", "a touch", "nothing"]
)
def test_the_block_is_the_same_cold_warm_and_after_another_process_wrote(
    store_rows: np.random.Generator, db: Engine, change: str, ways: str
) -> None:
    first = cold()
    assert first == texts(), "warm"
    other = create_engine(db.url.render_as_string(hide_password=False))  # not the reader's
    pm = t.persona_memory.c
    with other.begin() as c:
        if change == "a new row":
            row = new_row(store_rows, "warren", "u:42", 999)
            row.update(text="u:42 just moved to Lisbon.", importance=10)
            row.update(created="2026-11-30T10:00:00+00:00")
            c.execute(insert(t.persona_memory).values(**row))
        elif change == "a closed row":
            winner = opened("warren", {DAN}, "topic", now=NOW, touch=False).row_ids[0]
            c.execute(update(t.persona_memory).where(pm.id == winner).values(valid_to="2026-11-30"))
        elif change == "a deleted row":
            winner = opened("warren", {DAN}, "topic", now=NOW, touch=False).row_ids[0]
            c.execute(delete(t.persona_memory).where(pm.id == winner))
        elif change == "a touch":
            c.execute(
                update(t.persona_memory)
                .where(pm.id % 3 == 0)
                .values(last_recalled="2026-11-30T09:00:00+00:00", recall_count=1)
            )
    other.dispose()
    after = texts()  # a cache miss: refetched, vectors carried over
    carried = held("warren")
    assert after == cold()
    fresh = held("warren")
    assert np.array_equal(carried.ids, fresh.ids)
    assert np.array_equal(row_vectors(carried), row_vectors(fresh))
    assert row_cosines(carried).keys() == row_cosines(fresh).keys()
    for topic, cos in row_cosines(fresh).items():
        assert np.array_equal(row_cosines(carried)[topic], cos), "the cosines a cold open computes"
    if change == "a new row":
        assert "Lisbon" in after[0] and "Lisbon" in after[4]
    elif change == "nothing":
        assert after == first


def test_the_cache_stays_under_its_byte_bound(store_rows: np.random.Generator) -> None:
    bound = 40_000  # about two personas' columns with vectors, not more
    want = cold()
    small = ReadCache(max_bytes=bound)
    cache_loader.READ_CACHE, saved = small, cache_loader.READ_CACHE
    try:
        for _ in range(3):
            assert texts() == want, "a small cache changes no block"
            assert 0 < small.bytes <= bound
            held = list(small._entries.values())
            assert small.bytes == sum(e.nbytes for e in held)
    finally:
        cache_loader.READ_CACHE = saved


def test_audiences_of_one_persona_share_one_entry(store_rows: np.random.Generator) -> None:
    cache_loader.READ_CACHE.clear()
    dans = opened("warren", {DAN}, "topic", now=NOW, touch=False)
    after_dan = cache_loader.READ_CACHE.bytes
    block = opened("warren", {CARA}, "topic-cara", now=NOW, touch=False)
    keys = [k for k in cache_loader.READ_CACHE._entries if k[2] == "warren"]
    assert len(keys) == 1, "one entry for Warren, whoever is in the room"
    grown = cache_loader.READ_CACHE.bytes - after_dan
    kept = held("warren").winners
    assert set(kept) == {*dans.row_ids, *block.row_ids}, "both blocks' rows, kept for next time"
    new = [kept[i] for i in set(block.row_ids) - set(dans.row_ids)]
    rows = sum(ROW_OVERHEAD_BYTES + len(r.text) for r in new)
    assert grown == (180 + 40) * 8 + rows, "Cara's room added one topic's cosines, no columns"


def test_a_persona_past_the_bound_ranks_its_oldest_rows_without_relevance(
    store_rows: np.random.Generator, db: Engine
) -> None:
    bound = 13_000  # Warren's 220 rows of columns fit; the vectors of only about 100
    small = ReadCache(max_bytes=bound)
    cache_loader.READ_CACHE, saved = small, cache_loader.READ_CACHE
    try:
        got = opened("warren", {DAN}, "topic", now=NOW, touch=False).text
        entry = small.held(settings_mod.current().database_url)["warren"]
        cut = int(np.argmax(entry.slots >= 0))  # the oldest row with a vector
        assert 0 < cut < len(entry), "some vectors fit, not all"
        assert small.bytes <= bound
        assert got == opened("warren", {DAN}, "topic", now=NOW, touch=False).text, "warm"
        oldest = entry.ids[cut - 1]
    finally:
        cache_loader.READ_CACHE = saved
    # The same ranking as a store whose oldest rows have no embedding, with room to spare.
    with store.transaction() as c:
        pm = t.persona_memory.c
        c.execute(
            update(t.persona_memory)
            .where(pm.persona == "warren", pm.id <= int(oldest))
            .values(embedding=None)
        )
    assert got == cold()[4]


def test_the_bound_comes_from_one_setting_named_in_its_error() -> None:
    env = {"MW_READ_CACHE_BYTES": "64000000"}
    assert settings_mod.Settings.from_env(env).read_cache_bytes == 64_000_000
    assert settings_mod.Settings.from_env({}).read_cache_bytes == 256 * 2**20
    with pytest.raises(ConfigError, match="MW_READ_CACHE_BYTES"):
        settings_mod.Settings.from_env({"MW_READ_CACHE_BYTES": "lots"})


# --- any writes elsewhere, in any order: the warm block is the cold block ---------------------

ROOMS = (("dm", DAN), ("dm-cara", CARA), ("topic", DAN), ("topic-cara", CARA))
writes = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.sampled_from(["warren", "nolan"]),
            st.sampled_from(["u:42", "u:17", "world"]),
            st.integers(3, 10),
            st.booleans(),  # with an embedding
        ),
        st.tuples(st.sampled_from(["close", "delete", "touch", "reembed"]), st.integers(0, 10**6)),
        st.tuples(st.just("open"), st.sampled_from(range(len(ROOMS))), st.booleans()),
    ),
    min_size=1,
    max_size=12,
)


def write_elsewhere(other: Engine, op: tuple[Any, ...], rng: np.random.Generator, n: int) -> None:
    """One write to Warren's or Nolan's rows as another process would make it."""
    pm = t.persona_memory.c
    with other.begin() as c:
        if op[0] == "add":
            _, persona, subject, importance, embedded = op
            row = new_row(rng, persona, subject, n)
            row.update(importance=importance, created="2026-11-30T10:00:00+00:00")
            if not embedded:
                row["embedding"] = None
            c.execute(insert(t.persona_memory).values(**row))
            return
        ids = [i for (i,) in c.execute(select(pm.id).where(pm.valid_to.is_(None)).order_by(pm.id))]
        if not ids:
            return
        target = pm.id == ids[op[1] % len(ids)]
        if op[0] == "close":
            c.execute(update(t.persona_memory).where(target).values(valid_to="2026-11-30"))
        elif op[0] == "delete":
            c.execute(delete(t.persona_memory).where(target))
        elif op[0] == "touch":
            day = 1 + op[1] % 30
            stamp = f"2026-11-{day:02d}T09:00:00+00:00"
            c.execute(update(t.persona_memory).where(target).values(last_recalled=stamp))
        else:  # an operator's re-embed: the same row, another vector
            c.execute(update(t.persona_memory).where(target).values(embedding=vector(rng)))


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=writes, bound=st.sampled_from([None, 13_000]))
def test_after_any_writes_elsewhere_a_warm_open_renders_what_a_cold_one_does(
    store_rows: np.random.Generator,
    db: Engine,
    ops: list[tuple[object, ...]],
    bound: int | None,
    ways: str,
) -> None:
    other = create_engine(db.url.render_as_string(hide_password=False))  # not the reader's
    warm, saved = ReadCache(max_bytes=bound), cache_loader.READ_CACHE
    try:
        cache_loader.READ_CACHE = warm
        texts()  # every persona held, with the topics' vectors
        for n, op in enumerate(ops):
            if op[0] == "open":
                room, who = ROOMS[op[1]]
                opened("warren" if op[2] else "nolan", {who}, room, now=NOW, touch=False)
            else:
                write_elsewhere(other, op, store_rows, 10_000 + n)
        after = texts()
        held = list(warm._entries.values())
        assert warm.bytes == sum(e.nbytes for e in held) <= warm.max_bytes, "the bound holds"
        cache_loader.READ_CACHE = ReadCache(max_bytes=bound)
        assert after == texts(), "the warm cache, brought up to date, ranks as a cold one"
    finally:
        cache_loader.READ_CACHE = saved
        other.dispose()


def test_a_row_re_embedded_elsewhere_ranks_on_its_new_vector_at_the_next_open(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """`memory-worker reembed` in another process rewrites vectors in place: a warm cache must
    not go on ranking a row on the vector it had."""
    first = opened("warren", {DAN}, "topic", now=NOW, touch=False)
    pm, r = t.persona_memory.c, t.rooms.c
    with db.connect() as c:
        topic = c.execute(select(r.topic_embedding).where(r.id == "topic")).scalar_one()
    away = (-np.frombuffer(topic, dtype=np.int8).astype(np.int16)).clip(-127, 127)
    blob = away.astype(np.int8).tobytes()
    other = create_engine(db.url.render_as_string(hide_password=False))
    with other.begin() as c:  # the top row now points away from the room's topic
        top = first.row_ids[0]
        c.execute(update(t.persona_memory).where(pm.id == top).values(embedding=blob))
    other.dispose()
    warm = opened("warren", {DAN}, "topic", now=NOW, touch=False)
    assert warm.text == cold()[4], "topic room, Warren"
    assert warm.row_ids[:1] != first.row_ids[:1], "the re-embedded row lost its place"


def test_a_row_deleted_elsewhere_leaves_no_copy_of_its_vector_in_the_cache(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """A delete reaches every copy: the embedding of a deleted row is zeroed in the vector
    store at the next open, not kept in a dead slot."""
    first = opened("warren", {DAN}, "topic", now=NOW, touch=False)
    pm = t.persona_memory.c
    gone = first.row_ids[0]
    with db.connect() as c:
        blob = c.execute(select(pm.embedding).where(pm.id == gone)).scalar_one()
    entry = held("warren")
    assert entry.vectors is not None

    def copies() -> int:
        assert entry.vectors is not None
        m = entry.vectors.matrix
        return int(np.all(m == np.frombuffer(blob, dtype=np.int8), axis=1).sum())

    assert copies() == 1
    other = create_engine(db.url.render_as_string(hide_password=False))
    with other.begin() as c:
        c.execute(delete(t.persona_memory).where(pm.id == gone))
    other.dispose()
    opened("warren", {DAN}, "topic", now=NOW, touch=False)
    assert held("warren").vectors is entry.vectors, "the same store, caught up in place"
    assert copies() == 0


@pytest.mark.parametrize("room,who", [("dm", DAN), ("topic", DAN), ("topic-cara", CARA)])
def test_a_cold_open_reads_only_what_its_audience_can_see_and_renders_what_a_warm_one_does(
    store_rows: np.random.Generator, monkeypatch: pytest.MonkeyPatch, room: str, who: int
) -> None:
    """A cold open (docs/design.md §3.2): a persona this process does not hold answers from the
    rows of its audience (world rows and the present human's), the fill reads the rest off the
    caller's path, and the block is byte for byte what the filled entry gives."""
    with store.transaction() as c:  # rows about a hundred other humans: never this room's
        c.execute(
            insert(t.persona_memory),
            [new_row(store_rows, "warren", f"u:{1000 + i % 100}", i) for i in range(300)],
        )
    read: list[int] = []
    real = cache_loader.read_path.visible_open_rows

    def counted(*a: Any, **k: Any) -> Any:
        got = real(*a, **k)
        read.append(len(got))
        return got

    monkeypatch.setattr(cache_loader.read_path, "visible_open_rows", counted)
    cache_loader.READ_CACHE.clear()
    cold = build_block("warren", {who}, room, now=NOW, touch=False).text
    visible = 40 + (120 if who == DAN else 60)  # the world's and the present human's
    assert read == [visible], "a cold open reads its audience's rows, no one else's"
    assert fill.FILLS.wait(30)
    assert len(held("warren")) == 120 + 60 + 40 + 300, "the fill holds every open row"
    warm = build_block("warren", {who}, room, now=NOW, touch=False).text
    assert read == [visible], "a warm open reads no columns"
    assert cold == warm


def _columns(version: int, stamp: int, ids: list[int]) -> PersonaRows:
    n = len(ids)
    return PersonaRows(
        version=Version(version, stamp),
        ids=np.array(ids, dtype=np.int64),
        groups=np.full(n, DAN, dtype=np.int64),
        kinds=np.zeros(n, dtype=np.int64),
        importance=np.full(n, 0.5),
        recalled_day=np.zeros(n),
        chars=np.full(n, 20, dtype=np.int64),
        alone=np.zeros(n, dtype=np.int8),
    )


def test_a_read_begun_before_this_processs_own_touch_is_brought_forward_not_put_back() -> None:
    """A topic open reads the entry at v1 and loads its vectors; meanwhile the flush applies
    the open's own touch (v1 → v2). Kept as read, the entry would sit behind the store: every
    later touch would miss it, and the next open patch from the change log (5x a warm open
    at 100k rows), losing the vectors. Brought forward by the touch, it is v2 with vectors."""
    cache, key = ReadCache(max_bytes=10_000_000), ("sqlite:///x.db", "s", "warren")
    cache.enter(key[0], key[1])
    v1, v2 = Version(10, 111), Version(12, 222)
    cache.put(key, _columns(10, 111, [1, 2, 3]))
    read = cache.get(key, v1)
    assert read is not None
    touch = (np.array([2]), 20_000.0, "2024-10-04T00:00:00+00:00", 1)
    cache.touched(key[0], key[1], {"warren": (v1, v2, [touch])})
    assert cache.get(key, v2) is not None
    loaded = cache.fill(key, replace(read, slots=None, vectors=Vectors(DIMS, 3)), lambda ids: {})
    held = cache.get(key, v2)
    assert held is not None, "the read begun at v1 put the entry back behind the touch"
    assert held.vectors is loaded.vectors  # what the read loaded is kept...
    assert held.recalled_day.tolist() == [0.0, 20_000.0, 0.0]  # ...with the touch on it


def test_a_read_that_missed_another_write_never_puts_the_entry_back_behind_it() -> None:
    cache, key = ReadCache(max_bytes=10_000_000), ("sqlite:///x.db", "s", "warren")
    cache.enter(key[0], key[1])
    cache.put(key, _columns(12, 222, [1, 2, 3, 4]))  # another process wrote row 4: v12
    cache.put(key, _columns(10, 111, [1, 2, 3]))  # a read that began at v10 lands late
    assert cache.get(key, Version(12, 222)) is not None
    assert cache.get(key, Version(10, 111)) is None


# --- a persona this process does not hold: its pack (storage/read_packs.py) -----------------


@contextmanager
def main_thread_statements(db: Engine) -> Iterator[list[str]]:
    """Every statement the opening thread itself runs on `db` meanwhile (the fill's aside)."""
    seen: list[str] = []

    def note(*args: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            seen.append(args[2])

    event.listen(db, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(db, "before_cursor_execute", note)


class MainThreadReads:
    """What the opening thread itself reads (the fill's own reads, on its thread, aside)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, int]] = []
        for name in ("visible_open_rows", "open_rows", "embeddings"):
            real = getattr(cache_loader.read_path, name)
            monkeypatch.setattr(cache_loader.read_path, name, self._counted(name, real))

    def _counted(self, name: str, real: Any) -> Any:
        def counted(*a: Any, **k: Any) -> Any:
            got = real(*a, **k)
            if threading.current_thread() is threading.main_thread():
                self.calls.append((name, len(got)))
            return got

        return counted


def other_process_writes(db: Engine, rng: np.random.Generator, who: int) -> None:
    """A new row about Dan, a touch and a close of rows about `who`, as another process
    writes them."""
    other = create_engine(db.url.render_as_string(hide_password=False))
    pm = t.persona_memory.c
    with other.begin() as c:
        row = new_row(rng, "warren", "u:42", 999)
        row.update(text="u:42 just moved to Lisbon.", importance=10)
        c.execute(insert(t.persona_memory).values(**row))
        about = (pm.persona == "warren") & (pm.subject == f"u:{who}")
        ids = [i for (i,) in c.execute(select(pm.id).where(about).order_by(pm.id).limit(2))]
        c.execute(
            update(t.persona_memory)
            .where(pm.id == ids[0])
            .values(last_recalled="2026-11-30T09:00:00+00:00")
        )
        c.execute(update(t.persona_memory).where(pm.id == ids[1]).values(valid_to="2026-11-30"))
    other.dispose()


@pytest.mark.parametrize("room,who", [("dm", DAN), ("topic", DAN), ("topic-cara", CARA)])
def test_a_process_that_does_not_hold_a_persona_ranks_on_its_pack_and_the_rows_changed_since(
    store_rows: np.random.Generator,
    db: Engine,
    monkeypatch: pytest.MonkeyPatch,
    room: str,
    who: int,
) -> None:
    """The fill of a cold open packs the persona; another process's first open (its cache
    empty) then reads that pack and the three rows written since: no other row, no other
    embedding. Its block is byte for byte the one a store with no pack gives."""
    opened("warren", {who}, room, now=NOW, touch=False)  # no pack yet: the fill writes one
    with db.connect() as c:
        assert c.execute(select(t.persona_read_packs.c.persona)).scalars().all() == ["warren"]
    other_process_writes(db, store_rows, who)
    reads = MainThreadReads(monkeypatch)
    cache_loader.READ_CACHE.clear()
    got = build_block("warren", {who}, room, now=NOW, touch=False).text
    assert ("visible_open_rows", 120 + 60 + 40) not in reads.calls
    assert [c for c in reads.calls if c[0] != "embeddings"] == [("open_rows", 2)], (
        "the new row and the touched one (the closed one is gone): nothing else"
    )
    if room != "dm":
        visible = 2 if who == DAN else 1  # the new row is about Dan
        assert [c for c in reads.calls if c[0] == "embeddings"] == [("embeddings", visible)], (
            "the pack's cosines to this topic for every row not written since"
        )
    assert fill.FILLS.wait(30)
    with store.transaction() as c:
        c.execute(delete(t.persona_read_packs))
    assert got == cold()[[r for r, _ in ROOMS].index(room) * 2], "the block without a pack"


def test_a_delete_takes_its_rows_out_of_the_personas_packs_in_its_own_transaction(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """The pack outlives the human's delete, at the persona's version after it, and holds not
    one number of the deleted row; another persona's pack is left as it was."""
    opened("warren", {DAN}, "topic", now=NOW, touch=False)
    opened("nolan", {DAN}, "topic", now=NOW, touch=False)

    def kept(persona: str) -> tuple[read_packs.Pack, Version]:
        with db.connect() as c:
            pack = read_packs.packs(c, [persona], topic_of("topic"))[persona]
            return pack, read_path.versions(c, [persona])[persona]

    nolan = kept("nolan")
    pm = t.persona_memory.c
    with store.transaction() as c:
        gone = c.execute(select(pm.id).where(pm.persona == "warren").limit(1)).scalar_one()
        memories.delete_rows(c, [gone])
    pack, now = kept("warren")
    assert pack.version == now and pack.topic is not None and pack.topic.version == now
    assert gone not in unpacked(pack.columns, pack.version).ids.tolist()
    assert gone not in np.frombuffer(pack.topic.ids, dtype="<i8").tolist()
    assert len(np.frombuffer(pack.topic.cosines, dtype="<f8")) == pack.rows == 219
    assert kept("nolan") == nolan


def topic_of(room: str) -> bytes:
    with store.transaction() as c:
        vector = c.execute(select(t.rooms.c.topic_embedding).where(t.rooms.c.id == room))
        return bytes(vector.scalar_one())


def test_a_cold_open_after_the_humans_deletes_reads_the_pack_and_no_row_by_id(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """A delete once dropped the pack: every cold open after it, in every process, read
    every visible row's vector by id. Now the statements of a cold open after a delete and
    a clear are those of one before them (the context, the pack, the winners' rows: no
    row re-read, no embedding), and its block is the one a store with no pack gives."""
    opened("warren", {DAN}, "topic", now=NOW, touch=False)  # the pack and the topic's cosines

    def cold_open() -> tuple[str, list[str]]:
        cache_loader.READ_CACHE.clear()
        with main_thread_statements(db) as seen:
            text = build_block("warren", {DAN}, "topic", now=NOW, touch=False).text
        assert fill.FILLS.wait(30)
        return text, seen

    _, before = cold_open()
    pm = t.persona_memory.c
    with db.connect() as c:
        about_dan = select(pm.id).where(pm.persona == "warren", pm.subject == "u:42")
        first = c.execute(about_dan.order_by(pm.id).limit(1)).scalar_one()
    controls.delete_row(DAN, first)
    assert controls.clear_all(CARA, "warren") == 60
    got, after = cold_open()
    assert not [s for s in after if "persona_memory.embedding" in s], "no row's vector by id"
    assert after == before, "the same statements as before the deletes"
    with store.transaction() as c:
        c.execute(delete(t.persona_read_packs))
        c.execute(delete(t.persona_read_topics))
    cache_loader.READ_CACHE.clear()
    assert got == build_block("warren", {DAN}, "topic", now=NOW, touch=False).text


def test_a_fill_the_store_moved_past_still_packs_at_the_personas_version_now(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """A fresh process at 100k rows never packed while the persona was in use: its own touch
    committed during the fill, and a pack was written only at the version the fill read. Now
    the entry is brought up to the store inside the write: the pack holds the new row and
    the touched one as the store has them, not the deleted one; the topic's cosines leave
    out every row written since (an open reads those by id)."""
    opened("warren", {DAN}, "topic", now=NOW, touch=False)
    url = settings_mod.current().database_url
    entry = cache_loader.READ_CACHE.held(url)["warren"]
    key = next(k for k in cache_loader.READ_CACHE._entries if k[2] == "warren")
    pm = t.persona_memory.c
    with store.transaction() as c:
        c.execute(delete(t.persona_read_packs))
        c.execute(delete(t.persona_read_topics))
        first, second = c.execute(
            select(pm.id).where(pm.persona == "warren").order_by(pm.id).limit(2)
        ).scalars()
        new = c.execute(
            insert(t.persona_memory).values(**new_row(store_rows, "warren", "u:42", 500))
        ).inserted_primary_key[0]
        memories.delete_rows(c, [first])
    with read_path.touching(url) as c:  # this process's own touch, as the fill reads
        read_path.touch(c, "warren", [second], "2026-12-01T11:00:00+00:00")
    fill.keep_pack(url, key, entry)  # read before all three writes
    with db.connect() as c:
        pack = read_packs.packs(c, ["warren"], topic_of("topic"))["warren"]
        now = read_path.versions(c, ["warren"])["warren"]
        open_ids = c.execute(
            select(pm.id).where(pm.persona == "warren", pm.valid_to.is_(None)).order_by(pm.id)
        ).scalars()
        assert pack.version == now and pack.topic is not None and pack.topic.version == now
        columns = unpacked(pack.columns, pack.version)
        assert columns.ids.tolist() == list(open_ids) and pack.rows == len(columns)
        touched = columns.recalled_day[columns.ids.tolist().index(second)]
        assert touched == pytest.approx(cache_loader.unix_day("2026-12-01T11:00:00+00:00"))
        cosines_of = np.frombuffer(pack.topic.ids, dtype="<i8").tolist()
        assert not {first, second, new} & set(cosines_of) and len(cosines_of) == len(entry) - 2


def test_the_fill_starts_when_the_open_returns_and_waits_while_another_is_in_flight(
    store_rows: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fill never slows the open it follows."""
    from memory_worker.reader import threads

    asked: list[int] = []
    real = fill.FILLS.request

    def request(*a: Any, **k: Any) -> None:
        asked.append(threads.OPENS._count)
        real(*a, **k)

    monkeypatch.setattr(fill.FILLS, "request", request)
    monkeypatch.setattr(threads, "YIELD_MAX_S", 3600.0)
    cache_loader.READ_CACHE.clear()
    with threads.OPENS.opening():  # another room open, still in flight
        build_block("warren", {DAN}, "topic", now=NOW, touch=False)
        assert asked == [1], "asked for as the open returned: only the other one in flight"
        assert not fill.FILLS.wait(1.0), "the fill waits for the open in flight"
        assert not cache_loader.READ_CACHE.held(settings_mod.current().database_url)
    assert fill.FILLS.wait(30), "and runs once none is"
    assert "warren" in cache_loader.READ_CACHE.held(settings_mod.current().database_url)


def test_catching_up_on_an_opens_path_never_grows_the_vector_store(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """A slow mode found after another process wrote, at 100k rows: the open that caught
    up with the write copied every vector the persona holds into a larger store. Now a new
    row that finds no spare slot waits for the fill thread, ranked meanwhile on its vector
    read by id: the same block."""
    opened("warren", {DAN}, "topic", now=NOW, touch=False)
    url = settings_mod.current().database_url
    before = cache_loader.READ_CACHE.held(url)["warren"]
    assert before.vectors is not None
    spare = before.vectors.capacity - before.vectors.used
    other = create_engine(db.url.render_as_string(hide_password=False))
    with other.begin() as c:
        rows = [new_row(store_rows, "warren", "u:42", 2000 + i) for i in range(spare + 1)]
        c.execute(insert(t.persona_memory), rows)
    other.dispose()
    got = build_block("warren", {DAN}, "topic", now=NOW, touch=False)
    entry = cache_loader.READ_CACHE.held(url)["warren"]
    assert entry.vectors is before.vectors and entry.vectors.capacity == before.vectors.capacity
    assert cache_loader.READ_CACHE.pending(entry), "the new rows wait for the fill thread"
    assert fill.FILLS.wait(30)
    assert not cache_loader.READ_CACHE.pending(cache_loader.READ_CACHE.held(url)["warren"])
    assert got.text == cold()[4]


def test_an_open_between_its_own_touchs_commit_and_the_cache_taking_it_reads_nothing() -> None:
    """Warm opens with touch once cost 3x those without. The touch commits, then tells
    the cache; an open in between saw the store a version ahead of the entry and re-read the
    touched rows. The touch now says what it wrote before it commits, and the open brings the
    entry forward by it; the cache taking it afterwards changes nothing twice."""
    cache, key = ReadCache(max_bytes=10_000_000), ("sqlite:///x.db", "s", "warren")
    cache.enter(key[0], key[1])
    v1, v2 = Version(10, 111), Version(12, 222)
    cache.put(key, _columns(10, 111, [1, 2, 3]))
    moves = {"warren": (v1, v2, [(np.array([2, 3]), 20_000.0, "2024-10-04T00:00:00+00:00", 1)])}
    cache.expect(key[0], key[1], moves)
    assert cache.get(key, v1) is not None, "not committed yet: the store is still at v1"
    got = cache.get(key, v2)  # committed: an open reads v2 before `touched`
    assert got is not None and got.recalled_day.tolist() == [0.0, 20_000.0, 20_000.0]
    cache.touched(key[0], key[1], moves)
    after = cache.get(key, v2)
    assert after is got, "applied once"
    assert cache.get(key, Version(12, 333)) is None, "another write's v12 is not this one"


def test_a_topics_cosines_outlive_a_pack_written_without_them(
    store_rows: np.random.Generator, db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that held no vector (its rooms had no topic) packs the persona again; the
    topic's cosines kept before stay, so the next cold open of the topic room reads the
    embeddings of the rows written since them, not of every row it ranks."""
    opened("warren", {DAN}, "topic", now=NOW, touch=False)  # the pack and the topic's cosines
    with store.transaction() as c:  # another process's writes, past the pack's slack
        c.execute(
            insert(t.persona_memory),
            [new_row(store_rows, "warren", "u:42", 4000 + i) for i in range(20)],
        )
    cache_loader.READ_CACHE.clear()
    opened("warren", {DAN}, "dm", now=NOW, touch=False)  # packs again, no vector held
    with db.connect() as c:
        pv, tv = t.persona_read_packs.c.version, t.persona_read_topics.c.version
        assert c.execute(select(pv)).scalar_one() == c.execute(select(tv)).scalar_one() + 20
    reads = MainThreadReads(monkeypatch)
    cache_loader.READ_CACHE.clear()
    got = build_block("warren", {DAN}, "topic", now=NOW, touch=False).text
    assert [c for c in reads.calls if c[0] == "embeddings"] == [("embeddings", 20)]
    assert fill.FILLS.wait(30)
    with store.transaction() as c:
        c.execute(delete(t.persona_read_packs))
        c.execute(delete(t.persona_read_topics))
    assert got == cold()[4], "the block with nothing kept"


def _row(i: int) -> Row:
    return Row(
        id=i,
        persona="warren",
        subject="u:42",
        counterpart=None,
        witnessed=[DAN],
        room_id="dm",
        kind="fact",
        text=f"u:42 said thing {i}.",
        importance=5,
        valid_from=None,
        valid_to=None,
        closed_by=None,
        evidence=[1],
        created="2026-11-01T10:00:00+00:00",
    )


def test_winners_rows_read_before_this_processs_own_touch_are_kept_with_it_applied() -> None:
    cache, key = ReadCache(max_bytes=10_000_000), ("sqlite:///x.db", "s", "warren")
    cache.enter(key[0], key[1])
    v1, v2 = Version(10, 111), Version(12, 222)
    cache.put(key, _columns(10, 111, [1, 2, 3]))
    stamp = "2026-12-01T12:00:00+00:00"
    cache.touched(key[0], key[1], {"warren": (v1, v2, [(np.array([2]), 20_000.0, stamp, 1)])})
    cache.remember(key, v1, {1: _row(1), 2: _row(2)})  # read at v1, the touch landed since
    got = cache.get(key, v2)
    assert got is not None and set(got.winners) == {1, 2}
    assert (got.winners[2].last_recalled, got.winners[2].recall_count) == (stamp, 1)
    assert got.winners[1].last_recalled is None
    cache.remember(key, Version(11, 999), {3: _row(3)})  # another write lies between
    assert set(cache.get(key, v2).winners) == {1, 2}  # type: ignore[union-attr]


def test_a_put_at_the_same_version_keeps_what_opens_kept_meanwhile() -> None:
    """A fill read the entry, and meanwhile an open kept its winners' rows: the fill's put
    must not throw them away."""
    cache, key = ReadCache(max_bytes=10_000_000), ("sqlite:///x.db", "s", "warren")
    cache.enter(key[0], key[1])
    cache.put(key, _columns(10, 111, [1, 2, 3]))
    cache.remember(key, Version(10, 111), {2: _row(2)})
    cache.put(key, _columns(10, 111, [1, 2, 3]))  # the fill's own read, landing late
    got = cache.get(key, Version(10, 111))
    assert got is not None and set(got.winners) == {2}
    assert cache.bytes == got.nbytes


def test_a_cold_open_on_the_pack_keeps_the_entry_at_once(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """The next open is warm without waiting for the fill: the pack gave every row."""
    opened("warren", {DAN}, "dm", now=NOW, touch=False)  # the pack written
    cache_loader.READ_CACHE.clear()
    with threads.OPENS.opening():  # the fill waits: another open in flight
        first = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
        with main_thread_statements(db) as reads:
            again = build_block("warren", {DAN}, "dm", now=NOW, touch=False).text
        assert reads == [] and again == first


def test_an_entry_keeps_the_views_of_three_audiences_taking_turns(
    store_rows: np.random.Generator, db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warren opened by turns with Dan, with Cara and in a group (world facts only): each
    audience's view is made once, not every time another pushed it out (with two kept, a
    warm open at 10k rows paid the rule and the sort each time); and counted in the bytes."""
    monkeypatch.setattr(cache_loader, "VIEWS_FROM_ROWS", 0)
    with store.transaction() as c:
        app_side.add_room(c, "g", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
    made: list[object] = []
    real = cache_loader._view

    def counted(rows: PersonaRows, scope: Any) -> Any:
        made.append(scope)
        return real(rows, scope)

    monkeypatch.setattr(cache_loader, "_view", counted)
    rooms = [("dm", {DAN}), ("dm-cara", {CARA}), ("g", {DAN, CARA})]
    for room, who in rooms + rooms:  # the first is cold: its view is made with the entry held
        opened("warren", who, room, now=NOW, touch=False)
    made.clear()
    for _ in range(3):
        for room, who in rooms:
            opened("warren", who, room, now=NOW, touch=False)
    assert made == [], "every audience's view kept"
    entry = held("warren")
    assert len(entry.views) == 3
    assert cache_loader.READ_CACHE.bytes == sum(
        e.nbytes for e in cache_loader.READ_CACHE._entries.values()
    )
