"""Fault tests with real processes (benchmarks/faults.py, small): two Celery workers and a beat
running the frequent sweep, the real google-genai client at the stub. Under each fault every
room must end with its five rows — 0 lost, 0 duplicate rows, 0 duplicate or missing toasts,
every toast delivered, 0 reopened facts — and no worker may log a CRITICAL line. On PostgreSQL
and the host's Redis in .ci/run.

Each run takes 10–25 s on an idle machine; `-m "not faults"` leaves them out while you work.
What holds at any speed is asserted here: nothing lost, doubled or reopened, the quota's own
log in Redis, the order of events. How long things took (the last toast after a fault, the
calls' arrivals at the stub) depends on how busy the machine is: `make perf` measures it
(benchmarks/faults.py at the defaults, docs/performance.md's faults section)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import pytest

from benchmarks import faults
from memory_worker.core.settings import Settings
from memory_worker.tasks.rooms import recovery_bound_s
from memory_worker.testing import private_postgres
from tests.worker import spare_database

pytestmark = [pytest.mark.pipeline, pytest.mark.faults]
ROOMS = 3

# The defaults' logic at a tenth of their time: the sweep every 3 s (30 s), its grace 3 s
# (30 s), the toast lag 1 s (10 s), the in-flight claim 6 s (60 s; 5 s is the least it takes).
# At the defaults a kill or a wipe costs a lost chain's claim (60 s) and a sweep before it is
# recovered, most of these tests' time otherwise; scaled, the same sweep, lapse and
# exactly-once commit prove the same in 15 s. Every other setting is the default.
SCALED: dict[str, Any] = {
    "sweep_every_s": 3.0,
    "sweep_grace_s": 3.0,
    "sweep_lag_s": 1.0,
    "inflight_ttl_s": 6,
}


def run(
    fault: str,
    redis_url: str | None,
    quota_margin_s: float | None = None,
    overrides: dict[str, Any] | None = None,
    outage_s: float | None = None,
) -> faults.Figures:
    url = spare_database(redis_url, 3) if redis_url else None
    return faults.run(
        fault,
        rooms=ROOMS,
        redis_url=url,
        database_url=os.environ.get("MW_TEST_DATABASE_URL"),
        quota_margin_s=quota_margin_s,
        overrides=faults.FAST_SWEEP if overrides is None else overrides,
        outage_s=outage_s,
    )


def assert_clean(fig: faults.Figures) -> None:
    assert fig.notes == [], fig.notes  # a burst not read in time, or a worker's CRITICAL line
    nonzero = ", ".join(f"{k}={v}" for k, v in asdict(fig).items() if v)
    assert fig.clean, nonzero  # a str: pytest cuts a long repr short
    assert fig.rows == 5 * ROOMS and fig.spells_committed >= 3 * ROOMS


@pytest.mark.parametrize("fault", ["kill", "wipe"])
def test_after_a_sigkill_storm_or_a_wiped_broker_every_toast_is_delivered(
    fault: str, redis_url: str
) -> None:
    """At the defaults' logic (SCALED): every toast delivered after the faults — 0 lost,
    doubled or reopened. When the last one came, against the 120 s promise, is make perf's."""
    fig = run(fault, redis_url, overrides=SCALED)
    assert_clean(fig)
    assert fig.faults_injected >= 1
    assert fig.recovery_bound_s == recovery_bound_s(Settings.from_env({}).model_copy(update=SCALED))


@pytest.mark.parametrize("fault", ["chaos", "twice", "garbled"])
def test_under_each_model_or_message_fault_nothing_is_lost_doubled_or_reopened(
    fault: str, redis_url: str
) -> None:
    assert_clean(run(fault, redis_url))


def test_the_embedded_redis_killed_mid_run_comes_back_unsupervised_and_nothing_is_lost() -> None:
    """No supervisor, no test: the workers' own reconnects start it again."""
    fig = run("restart", None)
    assert fig.faults_injected == 1
    assert_clean(fig)


def test_a_quota_far_below_the_demand_parks_nothing_and_holds_in_its_own_log(
    redis_url: str,
) -> None:
    """Every room at once against 2 calls a second: no spell parks, and the quota's log in
    Redis holds every call the stub saw, never more than 2 in its window (the calls'
    arrivals at the stub, which a busy machine's jitter moves, are make perf's `at stub`)."""
    from tests.ops.test_ratelimit import MARGIN_S

    fig = run("quota", redis_url, quota_margin_s=MARGIN_S)  # a saturated host's margin
    assert_clean(fig)
    assert fig.parked == 0 and fig.parked_for_quota == 0
    assert fig.gate_calls >= fig.stub_calls > 0  # nothing reached the model around the gate
    assert fig.gate_most_in_window <= fig.quota_per_window


@pytest.mark.parametrize("fault", ["pgdown5", "sqlitelock"])
def test_a_store_outage_under_load_is_a_pause_every_toast_after_it_and_no_traceback(
    fault: str, redis_url: str
) -> None:
    """At the shipped defaults: the store stopped (a private PostgreSQL) or locked by another
    process (SQLite, 10 s here) mid-run. The steps wait it out — no spell handed to the sweep
    (an ERROR) — and nothing is lost, doubled or reopened; the workers log no traceback and no
    ERROR for what was a pause. In order: lines said before the store came back were toasted
    after it did (the outage held work up, which then went on). How soon after is make perf's
    `last toast s` (the pgdown faults, at the defaults)."""
    if fault.startswith("pgdown") and not private_postgres.available():
        pytest.skip("no initdb/pg_ctl here")
    if fault == "sqlitelock" and os.environ.get("MW_TEST_DATABASE_URL"):
        pytest.skip("the SQLite store's lock; this run's store is PostgreSQL")
    fig = run(fault, redis_url, overrides={}, outage_s=10.0 if fault == "sqlitelock" else None)
    assert_clean(fig)
    assert fig.faults_injected == 1
    assert (fig.tracebacks, fig.errors_logged) == (0, 0)
    assert fig.held_toast_s > 0, fig  # a toast the outage held, delivered once it was over
