"""The touch queue: a promised touch is applied in order, never dropped for lack of room."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from memory_worker.touch import Attempt, Touch, Toucher


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


def test_flush_reports_a_queue_it_could_not_drain_in_time() -> None:
    gate = threading.Event()
    toucher = Toucher(lambda _url, _touches, _attempt: gate.wait(10))
    toucher.promise(touch(1))
    assert not toucher.flush(0.2)
    gate.set()
    assert toucher.flush(10)


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
