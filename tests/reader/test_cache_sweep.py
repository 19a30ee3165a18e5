"""A delete reaches every copy: what another process deleted leaves this process's read cache
within `read_cache_sweep_s`, though no room opens here again (sweep.py)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, event, insert, select

from memory_worker import reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.errors import ConfigError
from memory_worker.core.read_columns import PersonaRows, Version
from memory_worker.reader import build_block, cache_loader, fill, sweep, threads
from memory_worker.reader.cache import ReadCache
from memory_worker.reader.sweep import Sweeper
from tests.reader import test_cache as test_read_cache
from tests.reader.test_cache import DAN, NOW, held, new_row

store_rows = test_read_cache.store_rows  # the same store as the cache's own tests

pytestmark = pytest.mark.store

ROOT = Path(__file__).resolve().parents[2]
SWEEP_S = 0.2  # short, so a test waits a fraction of a second for its pass


@pytest.fixture
def sweeping(db: Engine) -> None:
    settings_mod.configure(settings_mod.current().with_(read_cache_sweep_s=SWEEP_S))


def delete_in_another_process(url: str, user_id: int, row_id: int) -> None:
    """The human's delete, served by another app process: this one's cache is not told."""
    code = f"from memory_worker import controls; controls.delete_row({user_id}, {row_id})"
    env = {**os.environ, "MW_DATABASE_URL": url}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=120)


@pytest.mark.processes  # the delete comes from another process
def test_a_row_deleted_in_another_process_leaves_this_ones_cache_with_no_open_here(
    store_rows: np.random.Generator, db: Engine, sweeping: None
) -> None:
    first = build_block("warren", {DAN}, "topic", now=NOW, touch=False)  # vectors loaded
    gone = first.row_ids[0]
    pm = t.persona_memory.c
    with db.connect() as c:
        blob = c.execute(select(pm.embedding).where(pm.id == gone)).scalar_one()
    entry = held("warren")
    assert entry.vectors is not None and entry.slots is not None
    slot = int(entry.slots[np.searchsorted(entry.ids, gone)])
    vectors = entry.vectors
    assert bytes(vectors.matrix[slot].tobytes()) == blob, "the vector is held before"
    assert any(cos[slot] != 0 for cos in vectors.cosines.values()), "and its topic cosine"

    delete_in_another_process(db.url.render_as_string(hide_password=False), DAN, gone)
    assert sweep.SWEEP.wait_for_pass(timeout=30), "a sweep ran after the delete"

    assert not np.any(vectors.matrix[slot]), "the vector's slot is zeroed"
    assert vectors.norms[slot] == 0 and all(cos[slot] == 0 for cos in vectors.cosines.values())
    copies = np.all(vectors.matrix == np.frombuffer(blob, dtype=np.int8), axis=1)
    assert not copies.any(), "no other slot holds it"
    now = held("warren")
    assert gone not in now.ids, "nor do the ranking columns"
    with db.connect() as c:
        stored = c.execute(
            select(t.persona_memory_versions.c.version, t.persona_memory_versions.c.stamp).where(
                t.persona_memory_versions.c.persona == "warren"
            )
        ).one()
    assert now.version == tuple(stored), "the entry is at the store's version"
    warm = build_block("warren", {DAN}, "topic", now=NOW, touch=False)
    cache_loader.READ_CACHE.clear()
    assert warm.text == build_block("warren", {DAN}, "topic", now=NOW, touch=False).text


def test_a_sweep_lets_go_of_what_the_change_log_no_longer_reaches_and_reads_no_rows(
    store_rows: np.random.Generator, db: Engine, sweeping: None
) -> None:
    for persona in ("warren", "nolan"):
        build_block(persona, {DAN}, "topic", now=NOW, touch=False)
    assert sweep.SWEEP.wait_for_pass(timeout=30)  # the sweep runs before the writes, too
    with db.begin() as c:  # another process, more writes than the change log keeps (1,024)
        c.execute(
            insert(t.persona_memory),
            [new_row(store_rows, "warren", "u:42", i) for i in range(1100)],
        )
    reads: list[str] = []

    @event.listens_for(db, "before_cursor_execute")
    def _note(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "memory-read-sweep":
            reads.append(statement)

    assert sweep.SWEEP.wait_for_pass(timeout=30)
    event.remove(db, "before_cursor_execute", _note)
    url = settings_mod.current().database_url
    assert "warren" not in cache_loader.READ_CACHE.held(url), "dropped: nothing of it is kept"
    assert "nolan" in cache_loader.READ_CACHE.held(url), "a persona that did not move stays"
    assert reads, "the sweep read the versions"
    rows_read = [s for s in reads if re.search(r"\bFROM persona_memory\b", s)]
    assert not rows_read, "and no row: the next open reads them, if one ever comes"


def test_catching_up_keeps_an_entrys_place_in_the_lru_and_brings_back_nothing_let_go_of() -> None:
    def rows(n: int, version: int = 1) -> PersonaRows:
        z, zi = np.zeros(n), np.arange(n, dtype=np.int64)
        return PersonaRows(Version(version, version), zi, zi, zi, z, z, zi, zi.astype(np.int8))

    size = rows(100).nbytes
    cache = ReadCache(max_bytes=2 * size + size // 2)  # room for two entries
    cache.enter("db", "s")
    cache.put(("db", "s", "old"), rows(100))
    cache.put(("db", "s", "new"), rows(100))
    cache.put(("db", "s", "old"), rows(100, version=2), recent=False)  # a sweep caught it up
    cache.put(("db", "s", "third"), rows(100))
    assert set(cache.held("db")) == {"new", "third"}, "the least recently opened went first"
    cache.put(("db", "s", "new"), rows(100, version=2))  # an open: now the most recent
    cache.put(("db", "s", "fourth"), rows(100))
    assert set(cache.held("db")) == {"new", "fourth"}
    cache.put(("db", "s", "old"), rows(100, version=3), recent=False)  # caught up after it went
    assert set(cache.held("db")) == {"new", "fourth"}, "nothing let go of comes back"
    assert cache.bytes == 2 * size


def test_a_sweep_that_fails_is_counted_and_the_next_one_still_runs() -> None:
    passes: list[int] = []

    def sweep() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise OSError("the database is away")

    sweeper = Sweeper(sweep, lambda: 0.01)
    assert not sweeper.wait_for_pass(timeout=0.01), "no thread before start"
    sweeper.start()
    assert sweeper.wait_for_pass(timeout=30) and sweeper.wait_for_pass(timeout=30)
    assert sweeper.failures == 1 and len(passes) >= 2


def test_a_fill_that_fails_logs_its_traceback_once_and_counts_in_the_metrics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fill that failed logged only its error type, so a persona whose fill kept failing
    turned every open into a cold one, silently. Now its first failure of a kind carries the
    traceback, each later one its count, and `reader.metrics` counts them all."""
    away = f"sqlite:///{tmp_path / 'no such folder' / 'store.db'}"  # a store that cannot open
    before = reader.metrics()["fill_failures"]
    fill.FILLS._logged.clear()  # as in a fresh process: no failure of any kind logged yet
    with caplog.at_level(logging.WARNING, logger=fill.__name__):
        for _ in range(2):
            fill.FILLS.request(away, ["warren"], None)
            assert fill.FILLS.wait(30)
    failed = [r for r in caplog.records if r.name == fill.__name__]
    assert len(failed) == 2 and reader.metrics()["fill_failures"] == before + 2
    assert failed[0].exc_info and "Traceback" in caplog.text, "its traceback"
    assert not failed[1].exc_info, "once: the next failure of its kind by count"
    assert "2 so far" in failed[1].getMessage()


def test_the_sweep_interval_comes_from_one_setting_named_in_its_error() -> None:
    assert settings_mod.Settings.from_env({}).read_cache_sweep_s == 5.0
    assert (
        settings_mod.Settings.from_env({"MW_READ_CACHE_SWEEP_S": "0.5"}).read_cache_sweep_s == 0.5
    )
    for bad in ("0", "-1", "inf", "often"):
        with pytest.raises(ConfigError, match="MW_READ_CACHE_SWEEP_S"):
            settings_mod.Settings.from_env({"MW_READ_CACHE_SWEEP_S": bad})


def test_openers_racing_to_be_a_processs_first_start_one_sweep_thread() -> None:
    racers, extra = 8, 0
    errors: list[BaseException] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as it can: races show up
    try:
        for _ in range(30):
            before = {t.ident for t in threading.enumerate() if t.name == "memory-read-sweep"}
            sweeper = Sweeper(lambda: None, lambda: 3600.0)
            start = threading.Barrier(racers)

            def race(s: Sweeper = sweeper, b: threading.Barrier = start) -> None:
                b.wait()
                try:
                    s.start()
                    with s.paused():
                        pass
                except BaseException as e:  # noqa: BLE001 — a racing opener must not fail
                    errors.append(e)

            threads = [threading.Thread(target=race) for _ in range(racers)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(10)
            assert not errors, errors
            now = {t.ident for t in threading.enumerate() if t.name == "memory-read-sweep"}
            extra += len(now - before) - 1
    finally:
        sys.setswitchinterval(switch)
    assert extra == 0, f"{extra} sweep threads too many"


def test_a_sweep_writes_the_pack_of_a_persona_held_here_once_it_lags_past_its_slack(
    store_rows: np.random.Generator, db: Engine
) -> None:
    """A persona only ever opened warm here is packed by the sweep as the store moves on, so
    the process that opens it cold after a deploy reads few changed rows, not all."""
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    url = settings_mod.current().database_url
    pv = t.persona_read_packs.c

    def packed_at() -> int:
        with db.connect() as c:
            return int(c.execute(select(pv.version).where(pv.persona == "warren")).scalar_one())

    first = packed_at()
    rows = [new_row(store_rows, "warren", "u:42", 3000 + i) for i in range(20)]
    with db.begin() as c:  # another process's writes: past the 16 versions a small pack lags
        c.execute(insert(t.persona_memory), rows)
    sweep.catch_up()  # the sweep's pass
    now = cache_loader.READ_CACHE.held(url)["warren"].version
    assert packed_at() == now.counter == first + 20
    with db.begin() as c:
        c.execute(insert(t.persona_memory), rows[:3])
    sweep.catch_up()
    assert packed_at() == first + 20, "three versions behind: within its slack, not written"


def test_the_touch_waits_while_a_room_open_is_in_flight(
    store_rows: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_worker import reader

    build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    monkeypatch.setattr(threads, "YIELD_MAX_S", 3600.0)
    with threads.OPENS.opening():  # another room open, still in flight
        block = build_block("warren", {DAN}, "dm", now=NOW)
        assert block.touched
        assert not reader.flush_touches(timeout=1.0), "the touch waits for the open in flight"
    assert reader.flush_touches(timeout=30), "and lands once none is"


def test_a_sweep_between_a_touchs_commit_and_the_cache_taking_it_reads_no_row(
    store_rows: np.random.Generator, db: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep found the store a version ahead and patched from the change log: the rows the
    touch changed read again, and the entry's views and winners' rows made anew (at 100k rows
    a warm open then paid 8 ms). This process's own touch, noted before its commit, brings the
    entry forward instead."""
    from memory_worker import reader

    build_block("warren", {DAN}, "dm", now=NOW, touch=False)
    assert fill.FILLS.wait(30)
    build_block("warren", {DAN}, "dm", now=NOW, touch=False)  # views and winners' rows kept
    url = settings_mod.current().database_url
    before = cache_loader.READ_CACHE.held(url)["warren"]
    monkeypatch.setattr(cache_loader.READ_CACHE, "touched", lambda *a, **k: None)
    build_block("warren", {DAN}, "dm", now=NOW)
    assert reader.flush_touches(timeout=30)  # committed, noted, not yet taken
    reads: list[str] = []

    def note(*args: object) -> None:
        if "persona_memory " in str(args[2]) or "persona_memory\n" in str(args[2]):
            reads.append(str(args[2]))

    event.listen(db, "before_cursor_execute", note)
    try:
        assert sweep.catch_up() == 1
    finally:
        event.remove(db, "before_cursor_execute", note)
    after = cache_loader.READ_CACHE.held(url)["warren"]
    assert reads == [], "no row read again"
    assert after.version != before.version and after.views is before.views
    assert set(after.winners) == set(before.winners)
