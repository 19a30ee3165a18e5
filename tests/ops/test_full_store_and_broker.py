"""A full store and a full broker are pauses, on real processes (benchmarks/faults.py, small):
the Procfile's three workers and a beat at the shipped defaults, the real google-genai client at
the stub, each fault held mid-run and then cleared.

* The SQLite store full: the workers' connections held to the file's size (SQLite's own
  `PRAGMA max_page_count`, benchmarks/page_cap), so every write needing a page fails with
  "database or disk is full".
* The broker full: the test's embedded Redis given `CONFIG SET maxmemory` at what it uses
  (noeviction), so it refuses every write that grows it.

Each must end as a calm run does — every room's five rows, nothing lost or doubled, every
toast delivered (once the fault cleared: the harness waits for the outbox to empty) — with
the model called as often as without the fault (a wait that freed its claim paid its calls
again), no worker exiting, and no ERROR or CRITICAL line, no traceback. Nothing here is
timed: the figures are counts, and the harness waits on the store's own rows.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
import redis
from celery import Celery
from kombu import Connection, Consumer, Exchange, Queue
from sqlalchemy import Engine

import celeryconfig
from benchmarks import faults
from memory_worker.core import settings as settings_mod
from memory_worker.ops import embedded, local_worker, metrics
from memory_worker.tasks import startup, store_step
from memory_worker.testing.gemini_stub import GeminiStub
from tests.worker import spare_database

pytestmark = [pytest.mark.pipeline, pytest.mark.faults, pytest.mark.slow]
ROOMS = 3
HELD_S = 10.0  # the fault's length: long enough that every room's chain meets it
# Each room says three bursts, each read by one spell: one extract, one embed and one route
# call each, the same in every calm run (faults.run("none")).
CALLS = 3 * 3 * ROOMS
CALLS_SLACK = 1.1  # a fault's run calls the model within a tenth of a calm run's count


def run(fault: str, redis_url: str | None) -> faults.Figures:
    return faults.run(
        fault,
        rooms=ROOMS,
        redis_url=spare_database(redis_url, 3) if redis_url else None,
        # The broker's fault holds on PostgreSQL too (.ci/run); the disk's is SQLite's own.
        database_url=None if fault == "diskfull" else os.environ.get("MW_TEST_DATABASE_URL"),
        overrides={},
        outage_s=HELD_S,
    )


def assert_a_pause(fig: faults.Figures) -> None:
    nonzero = ", ".join(f"{k}={v}" for k, v in asdict(fig).items() if v)
    assert fig.faults_injected == 1, nonzero
    assert fig.notes == [], fig.notes  # a burst never read, a worker's "Unrecoverable error"
    assert fig.clean, nonzero  # nothing lost, doubled, reopened; every toast delivered
    assert fig.rows == 5 * ROOMS, nonzero
    assert fig.worker_exits == 0, nonzero
    assert (fig.errors_logged, fig.tracebacks) == (0, 0), nonzero
    # No call paid twice for the fault: as many as a calm run, give or take the tenth a busy
    # machine adds where a call outlives its timeout and is asked again (it would calm too).
    assert CALLS <= fig.model_calls <= CALLS * CALLS_SLACK, nonzero


def test_a_full_sqlite_store_under_load_is_waited_out_with_no_call_paid_twice(
    redis_url: str,
) -> None:
    if os.environ.get("MW_TEST_DATABASE_URL"):
        pytest.skip("SQLite's page cap; this run's store is PostgreSQL")
    assert_a_pause(run("diskfull", redis_url))


def test_a_full_broker_under_load_is_waited_out_and_no_worker_exits() -> None:
    """On the test's own embedded Redis: CONFIG SET on a shared one would fill it for all."""
    assert_a_pause(run("brokerfull", None))


def test_a_calm_run_calls_the_model_as_often_as_the_faults_are_held_to() -> None:
    """The baseline the two faults are held to, measured, not assumed."""
    fig = run("none", None)
    assert fig.clean and CALLS <= fig.model_calls <= CALLS * CALLS_SLACK, asdict(fig)


# --- the moves of a message, each under a full broker ------------------------------------------

MESSAGES = 12  # each half: held for their countdown, and taken off the queue
UNTIL_S = 180.0  # a bound on a wait for real events, never a figure asserted
# A message into a queue of a full broker, as kombu's hand-back does it here: the first write a
# deletion, so Redis lets the push after it through. KEYS: from, to.
_MOVE_ALL = """
redis.call('DEL', KEYS[1] .. ':none')
local n = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') do n = n + 1 end
return n
"""


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[redis.Redis]:
    """An embedded Redis of the test's own: CONFIG SET on a shared one would fill it for all."""
    state = tmp_path / "broker"
    client = redis.Redis.from_url(embedded.ensure_running(state))
    try:
        yield client
    finally:
        embedded.stop(state)


def _until(what: str, done: Callable[[], bool], alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + UNTIL_S
    while not done():
        assert alive(), f"the worker exited before {what}"
        assert time.monotonic() < deadline, f"not within {UNTIL_S:g}s: {what}"
        time.sleep(0.1)


def test_under_a_full_broker_a_worker_takes_records_acks_and_exits_not(
    own_broker: redis.Redis, db: Engine, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    """A real worker on the notify queue while its broker is over its maxmemory: messages it
    held for a countdown come due and are acked, and messages pushed onto its queue are taken,
    recorded as unacked, run and acked — every command kombu sends in a MULTI, which Redis
    refuses whole when full (the worker logged "CRITICAL Unrecoverable error" and exited, and
    a message taken whose record was refused was in neither place). All of them run, the
    unacked set ends empty, the worker is still up, and nothing is logged at ERROR."""
    broker_url = _own_url(own_broker)
    s = gemini_stub.settings(settings_mod.current()).with_(broker_url=broker_url)
    log = tmp_path / "worker.log"
    worker = local_worker.start(s, queues=("notify",), name="full", log=log, loglevel="INFO")
    probe = Celery("probe", broker=broker_url)
    try:
        local_worker.wait_ready(probe)
        # Sent by the probe's own app: the session's app stays bound to the session's broker.
        deliver = "memory_worker.deliver_toasts"
        for i in range(MESSAGES):  # fetched and recorded now, run once their countdown ends
            probe.send_task(deliver, (f"warren/r/{i + 1}",), queue="notify", countdown=4)
        for i in range(MESSAGES):  # a queue no worker here consumes: moved in when full
            probe.send_task(deliver, (f"warren/r/{100 + i}",), queue="commit")
        with faults.broker_full(own_broker):
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                own_broker.lpush("anything", "x")  # the fault holds
            assert own_broker.eval(_MOVE_ALL, 2, "commit", "notify") == MESSAGES
            _until(
                "every message run and acked",
                lambda: (
                    _ran(log) == 2 * MESSAGES
                    and own_broker.llen("notify") == 0
                    and own_broker.hlen("unacked") == 0
                ),
                alive=lambda: worker.poll() is None,
            )
            assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        probe.close()
        local_worker.stop(worker)
    said = log.read_text()
    assert "Traceback" not in said and "ERROR/" not in said and "CRITICAL/" not in said, said[
        -3000:
    ]


def test_a_worker_s_mailbox_is_refreshed_and_deleted_on_a_full_broker_with_nothing_said(
    own_broker: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's remote-control mailbox is a queue that expires, bound to a fanout exchange:
    kombu refreshes its binding with scripts in a MULTI (on a channel's first second, then
    hourly) and deletes it at a close in another MULTI. A full broker refused both whole: the
    refresh was logged as a WARNING with a traceback by the worker that met it, the deletion
    raised out of the close. Now the refresh waits for room and the deletion goes through."""
    mailbox = Queue(
        "w.celery.pidbox", Exchange("celery.pidbox", type="fanout"), expires=10.0, auto_delete=True
    )
    with Connection(_own_url(own_broker), transport=celeryconfig.broker_transport) as conn:
        channel = conn.channel()
        Consumer(channel, [mailbox], callbacks=[lambda body, message: None]).consume()
        with faults.broker_full(own_broker), caplog.at_level(logging.DEBUG):
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                own_broker.sadd("anything", "x")  # the fault holds
            conn.transport.cycle.maybe_refresh_binding_expiry()
            channel.close()
    said = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not said, [r.getMessage() for r in said]
    assert not own_broker.exists("_kombu.binding.celery.pidbox")  # deleted at the close


def _ran(log: Path) -> int:
    return sum(
        1
        for line in log.read_text(errors="replace").splitlines()
        if "memory_worker.deliver_toasts[" in line and " succeeded in " in line
    )


# --- what /healthz and the metrics say ------------------------------------------------------


def _own_url(client: redis.Redis) -> str:
    kw = client.connection_pool.connection_kwargs
    return f"redis://:{kw['password']}@127.0.0.1:{kw['port']}/0"


def _healthz() -> tuple[str, str]:
    """/healthz as the metrics server answers it: (status line, body)."""
    got: list[str] = []
    body = metrics.app(startup.health)(
        {"PATH_INFO": "/healthz"}, lambda status, _: got.append(status)
    )
    return got[0], b"".join(body).decode()


def _broker_full_gauge() -> float:
    (family,) = metrics.BrokerFull(startup.broker_full).collect()
    return float(family.samples[0].value)


def test_healthz_and_the_metrics_say_a_full_broker_is_full_not_down(
    own_broker: redis.Redis, db: Engine
) -> None:
    before = settings_mod.current()
    settings_mod.configure(before.with_(broker_url=_own_url(own_broker)))
    try:
        assert _healthz()[0].startswith("200") and _broker_full_gauge() == 0
        with faults.broker_full(own_broker):
            status, body = _healthz()
            assert status.startswith("503") and "broker: full (used " in body, body
            assert _broker_full_gauge() == 1
        assert _healthz()[0].startswith("200") and _broker_full_gauge() == 0
    finally:
        settings_mod.configure(before)


def test_healthz_and_the_metrics_say_a_full_store_is_full_until_a_write_goes_through(
    db: Engine, tmp_path: Path
) -> None:
    """A worker's write refused for space ("database or disk is full", SQLite's own, here
    from a file held to its size) makes its /healthz say the store is full — its reads still
    answer, so SELECT 1 alone would say ok — until a write of its goes through."""
    from tests.storage.test_outage import full_sqlite_error

    assert store_step.met(full_sqlite_error(tmp_path / "full.db")) == "full"
    try:
        status, body = _healthz()
        assert status.startswith("503") and "store: full (" in body, body
        assert metrics.store_full()
    finally:
        store_step.written()
    assert "store: ok" in _healthz()[1] and not metrics.store_full()


APP = """
import logging
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
from memory_worker import events
events.room_quiet("dm-dan")
print("returned")
"""


def test_the_app_s_room_quiet_on_a_full_broker_returns_and_says_it_was_refused(
    own_broker: redis.Redis, tmp_path: Path
) -> None:
    """The app waits for no full broker: its call is refused at once (not waited out for its
    MW_PUBLISH_TIMEOUT_S, which would read "no answer"), logged once, and never raises."""
    import subprocess
    import sys

    from memory_worker.storage import store
    from tests.scenes import people, private_chat

    url = f"sqlite:///{tmp_path / 'app.db'}"
    store.init_db(url)
    people(store.engine(url))
    private_chat(store.engine(url))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    env = {**clean, "MW_DATABASE_URL": url, "REDIS_URL": _own_url(own_broker),
           "MW_PUBLISH_TIMEOUT_S": "30"}  # fmt: skip
    with faults.broker_full(own_broker):
        out = subprocess.run(
            [sys.executable, "-c", APP], env=env, cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "returned", out.stderr
    said = [ln for ln in out.stderr.splitlines() if "not published" in ln]
    assert len(said) == 1 and "(BrokerFull)" in said[0], out.stderr
    assert "Traceback" not in out.stderr


def test_the_supervisor_judges_no_worker_by_its_pings_while_the_broker_is_full(
    own_broker: redis.Redis, tmp_path: Path
) -> None:
    """A full broker refuses a worker's reply to a ping (a push to its reply queue): three
    unanswered pings once restarted every worker, for the broker's fault. `memory-worker
    run` says the broker is full instead, and judges nobody until it has room."""
    from tests.ops.test_operations import supervise

    node = f"fullbroker{os.getpid()}@%h"
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "w: exec celery -A memory_worker.tasks.celery_app worker -Q events --pool solo "
        f"--hostname {node} --without-mingle --without-gossip --loglevel WARNING\n"
    )
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    from memory_worker import demo
    from memory_worker.storage import store

    store.init_db(url)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    env = {
        **clean,
        "MW_DATABASE_URL": url,
        "MW_CASSETTE": str(demo.CASSETTE),
        "REDIS_URL": _own_url(own_broker),
        "MW_STATE_DIR": str(tmp_path / "state"),
        "MW_LIVENESS_EVERY_S": "1",
    }
    proc, lines, reader = supervise(procfile, env, tmp_path, stop_timeout=5)
    try:
        _until(
            "the worker answers the supervisor's pings",
            lambda: any(ln.startswith("run | w answers pings as fullbroker") for ln in lines),
            alive=lambda: proc.poll() is None,
        )
        with faults.broker_full(own_broker):
            said = ("the broker is full (used ", "answered no ping")
            _until(
                "the supervisor says the broker is full, or restarts the worker",
                lambda: any(s in ln for ln in lines for s in said),
                alive=lambda: proc.poll() is None,
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.join()
    assert not any("answered no ping" in ln for ln in lines), lines
    assert any("no worker's liveness is judged until it has room" in ln for ln in lines), lines
