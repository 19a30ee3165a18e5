"""The touch queue: a promised touch is applied in order, never dropped for lack of room; and
exactly (docs/design.md §3 step 5): a row deleted before its touch lands is skipped, and a touch
whose commit went through is never applied again by a retry."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select

from memory_worker import app_side, controls, reader
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.reader import cache_loader
from memory_worker.reader import touch as touch_mod
from memory_worker.reader.touch import Attempt, Touch, Toucher
from memory_worker.storage import read_path


def touch(n: int) -> Touch:
    return Touch("sqlite:///x.db", (("warren", (n,)),), "2026-12-01T12:00:00+00:00", 20_000.0)


def test_a_full_queue_makes_the_opener_wait_and_every_touch_lands_in_order() -> None:
    gate, busy = threading.Event(), threading.Event()
    applied: list[int] = []

    def apply(_url: str, touches: Sequence[Touch], _attempt: Attempt) -> None:
        busy.set()
        gate.wait(10)
        applied.extend(t.rows[0][1][0] for t in touches)

    toucher = Toucher(apply, max_pending=2)
    toucher.promise(touch(0))
    assert busy.wait(10)  # the thread took it and is stuck applying it
    for n in (1, 2):
        toucher.promise(touch(n))  # the queue is now full
    third = threading.Thread(target=toucher.promise, args=(touch(3),))
    third.start()
    third.join(0.3)
    assert third.is_alive(), "a full queue makes the caller wait instead of dropping the touch"
    gate.set()
    third.join(10)
    assert toucher.flush(10)
    assert applied == [0, 1, 2, 3] and toucher.dropped == 0


def test_touches_promised_in_a_burst_land_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flush gathers a burst of opens' touches into one transaction (until GATHER_S has
    passed, or the queue is full: here it never passes, so the fifth touch releases them)."""
    monkeypatch.setattr(touch_mod, "GATHER_S", 3600.0)
    batches: list[list[int]] = []

    def apply(_url: str, touches: Sequence[Touch], _attempt: Attempt) -> None:
        batches.append([t.rows[0][1][0] for t in touches])

    toucher = Toucher(apply, max_pending=5)
    toucher.promise(touch(0))
    assert not toucher.flush(1.0), "a lone touch waits for others to join it"
    for n in range(1, 5):
        toucher.promise(touch(n))
    assert toucher.flush(10)
    assert batches == [[0, 1, 2, 3, 4]]


def test_flush_reports_a_queue_it_could_not_drain_in_time() -> None:
    gate = threading.Event()
    toucher = Toucher(lambda _url, _touches, _attempt: gate.wait(10))
    toucher.promise(touch(1))
    assert not toucher.flush(0.2)
    gate.set()
    assert toucher.flush(10)


@pytest.mark.slow  # a race stress: 100 rounds of eight threads, seconds of them
def test_touches_promised_at_once_by_a_processs_first_openers_all_land() -> None:
    """The queue and its thread are made at first use; openers racing to be first must share
    one queue, not each build one and lose what the other queued there."""
    openers = 8
    lost = 0
    lock = threading.Lock()
    errors: list[BaseException] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as it can: races show up
    try:
        for _ in range(100):
            applied: list[int] = []

            def apply(
                _url: str, touches: Sequence[Touch], _attempt: Attempt, into: list[int] = applied
            ) -> None:
                with lock:
                    into.extend(t.rows[0][1][0] for t in touches)

            toucher = Toucher(apply)
            start = threading.Barrier(openers)

            def open_room(n: int, t: Toucher = toucher, b: threading.Barrier = start) -> None:
                b.wait()
                try:
                    t.promise(touch(n))
                except BaseException as e:  # noqa: BLE001 — a racing opener must not fail
                    errors.append(e)

            threads = [threading.Thread(target=open_room, args=(n,)) for n in range(openers)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(10)
            assert toucher.flush(10)
            assert not errors, errors
            lost += openers - len(applied)
    finally:
        sys.setswitchinterval(switch)
    assert lost == 0, f"{lost} promised touches never landed"


# --- exact touches on a real store ------------------------------------------------------------

DAN = 42
NOW = "2026-12-01T12:00:00+00:00"


@pytest.fixture
def two_personas(db: Engine) -> dict[str, list[int]]:
    """Dan's private chat with Warren (three rows about Dan) and Nolan (one)."""
    rows: dict[str, list[int]] = {"warren": [], "nolan": []}
    with db.begin() as c:
        app_side.add_user(c, DAN, "Dan")
        for slug in rows:
            app_side.add_persona(c, slug, slug.title())
        app_side.add_room(c, "dm", "private", [f"u:{DAN}", "warren", "nolan"])
        for persona, n in (("warren", 3), ("nolan", 1)):
            for i in range(n):
                rows[persona].append(
                    c.execute(
                        insert(t.persona_memory).values(
                            persona=persona,
                            subject=f"u:{DAN}",
                            witnessed=f"[{DAN}]",
                            room_id="dm",
                            kind="fact",
                            text=f"Dan told {persona} thing {i}.",
                            importance=7,
                            evidence="[1]",
                            created="2026-11-20T10:00:00+00:00",
                        )
                    ).inserted_primary_key[0]
                )
    return rows


@pytest.fixture
def gated(two_personas: dict[str, list[int]]) -> Iterator[tuple[threading.Event, list[int]]]:
    """The reader's touch queue, its thread held at a gate until the test opens it (so a delete
    can land between a room open and its touch); `failures` makes the next apply fail *after*
    the real one returned (its transaction committed), as a lost answer to a commit would."""
    gate = threading.Event()
    failures: list[int] = []

    def apply(url: str, touches: Sequence[Touch], *rest: Any) -> None:
        gate.wait(30)
        touch_mod._apply_touches(url, touches, *rest)
        if failures:
            failures.pop()
            raise OSError("the answer to the commit was lost")

    saved, touch_mod.TOUCHES = touch_mod.TOUCHES, Toucher(apply)
    try:
        yield gate, failures
    finally:
        gate.set()
        touch_mod.TOUCHES.flush(30)
        touch_mod.TOUCHES = saved


def recall_counts(eng: Engine) -> dict[int, int]:
    pm = t.persona_memory.c
    with eng.connect() as c:
        return dict(c.execute(select(pm.id, pm.recall_count)).all())  # type: ignore[arg-type]


@pytest.mark.store
def test_a_row_deleted_before_its_touch_lands_is_skipped_and_no_other_row_is_touched_twice(
    db: Engine,
    two_personas: dict[str, list[int]],
    gated: tuple[threading.Event, list[int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate, _ = gated
    first = reader.blocks_for_room("dm", {DAN}, now=NOW)  # touch promised, held at the gate
    (nolans,) = two_personas["nolan"]
    assert nolans in first["nolan"].row_ids and first["warren"].touched
    controls.delete_row(DAN, nolans)  # Dan deletes Nolan's row before the touch lands
    again = reader.blocks_for_room("dm", {DAN}, now=NOW)
    assert not again["nolan"].row_ids
    gate.set()
    assert reader.flush_touches(timeout=30)

    assert "touch dropped" not in caplog.text
    assert touch_mod.TOUCHES.dropped == 0
    counts = recall_counts(db)
    assert nolans not in counts
    assert {i: counts[i] for i in two_personas["warren"]} == dict.fromkeys(
        two_personas["warren"], 2
    ), "each of Warren's rows once per open: not once per retry"


@pytest.mark.store
def test_a_touch_whose_commit_went_through_is_not_applied_again_by_the_retry(
    db: Engine,
    two_personas: dict[str, list[int]],
    gated: tuple[threading.Event, list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate, failures = gated
    monkeypatch.setattr(touch_mod, "RETRY_PAUSE_S", 0.01)
    failures.append(1)  # the first attempt commits, then fails
    block = reader.build_block("warren", {DAN}, "dm", now=NOW)
    gate.set()
    assert reader.flush_touches(timeout=30)
    assert not failures, "the first attempt failed after its commit"
    counts = recall_counts(db)
    assert {i: counts[i] for i in block.row_ids} == dict.fromkeys(block.row_ids, 1)
    entry = cache_loader.READ_CACHE.held(settings_mod.current().database_url)["warren"]
    with db.connect() as c:
        assert entry.version == read_path.versions(c, ["warren"])["warren"], "the cache took it"


@pytest.mark.store
def test_a_touch_names_its_rows_by_id_and_persona_so_it_never_lands_on_another_personas_row(
    db: Engine, two_personas: dict[str, list[int]]
) -> None:
    """An id that is no longer the persona's row (deleted, and the id taken again after a
    restore) touches nothing."""
    url = settings_mod.current().database_url
    stamp = "2026-12-01T12:00:00+00:00"
    warrens = two_personas["warren"][0]
    as_nolans = Touch(url, (("nolan", (warrens,)),), stamp, 20_423.5)
    touch_mod._apply_touches(url, [as_nolans], Attempt())
    assert recall_counts(db)[warrens] == 0


@pytest.mark.store
def test_a_burst_of_touches_writes_each_row_once_and_ends_as_one_by_one_would(
    db: Engine, two_personas: dict[str, list[int]]
) -> None:
    """Gathered touches fold together: a row takes the stamp of the last touch that named it
    and its recall count one for each, in one UPDATE per group of rows that end alike."""
    url = settings_mod.current().database_url
    a, b, c = two_personas["warren"]
    burst = [
        Touch(url, (("warren", (a, b)),), "2026-12-01T10:00:00+00:00", 20_423.4),
        Touch(url, (("warren", (a,)),), "2026-12-01T11:00:00+00:00", 20_423.5),
        Touch(url, (("warren", (b, c)),), "2026-12-01T12:00:00+00:00", 20_423.6),
    ]
    updates: list[str] = []

    def note(*args: Any) -> None:
        if str(args[2]).lstrip().upper().startswith("UPDATE PERSONA_MEMORY "):
            updates.append(str(args[2]))

    event.listen(db, "before_cursor_execute", note)
    try:
        touch_mod._apply_touches(url, burst, Attempt())
    finally:
        event.remove(db, "before_cursor_execute", note)
    pm = t.persona_memory.c
    with db.connect() as conn:
        got = {
            r.id: (r.last_recalled, r.recall_count)
            for r in conn.execute(select(pm.id, pm.last_recalled, pm.recall_count))
        }
    assert got[a] == ("2026-12-01T11:00:00+00:00", 2)
    assert got[b] == ("2026-12-01T12:00:00+00:00", 2)
    assert got[c] == ("2026-12-01T12:00:00+00:00", 1)
    assert len(updates) == 3, "(a: 11:00, twice), (b: 12:00, twice), (c: 12:00, once)"
