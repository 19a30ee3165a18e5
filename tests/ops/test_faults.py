"""Fault tests with real processes (benchmarks/faults.py, small): two Celery workers and a beat
running the frequent sweep, the real google-genai client at the stub. Under each fault every
room must end with its five rows — 0 lost, 0 duplicate rows, 0 duplicate or missing toasts,
every toast delivered, 0 reopened facts — and no worker may log a CRITICAL line. On PostgreSQL
and the host's Redis in .ci/run.

Each run takes 10–25 s; `-m "not faults"` leaves them out while you work."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import pytest

from benchmarks import faults
from memory_worker.core.settings import Settings
from memory_worker.tasks.rooms import RECOVERY_PROMISE_S, recovery_bound_s
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
# What the 120 s promise leaves the chains' own time at the defaults (59 s): a toast must be
# delivered within the scaled sweep's bound plus that.
CHAINS_S = RECOVERY_PROMISE_S - recovery_bound_s(Settings.from_env({}))


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
def test_after_a_sigkill_storm_or_a_wiped_broker_every_toast_is_delivered_within_the_bound(
    fault: str, redis_url: str
) -> None:
    """At the defaults' logic (SCALED): every toast delivered within the sweep's bound plus
    what the 120 s promise leaves the chains — 0 lost, doubled or reopened."""
    fig = run(fault, redis_url, overrides=SCALED)
    assert_clean(fig)
    assert fig.faults_injected >= 1
    assert fig.recovery_bound_s == recovery_bound_s(Settings.from_env({}).model_copy(update=SCALED))
    assert fig.last_toast_s <= fig.recovery_bound_s + CHAINS_S, fig


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


def test_a_quota_far_below_the_demand_parks_nothing_and_holds_at_the_stub(redis_url: str) -> None:
    """Every room at once against 2 calls a second."""
    from tests.ops.test_ratelimit import MARGIN_S

    fig = run("quota", redis_url, quota_margin_s=MARGIN_S)  # the margin the stub test uses
    assert_clean(fig)
    assert fig.parked == 0 and fig.parked_for_quota == 0
    assert fig.stub_most_in_window <= fig.quota_per_window


STORE_BACK_S = 20.0  # every toast this soon after the store's outage ends (the figure)


@pytest.mark.parametrize("fault", ["pgdown5", "sqlitelock"])
def test_a_store_outage_under_load_is_a_pause_every_toast_soon_after_and_no_traceback(
    fault: str, redis_url: str
) -> None:
    """At the shipped defaults: the store stopped (a private PostgreSQL) or locked by another
    process (SQLite, 10 s here) mid-run. The steps wait it out — no sweep needed, so no
    claim's lifetime — and nothing is lost, doubled or reopened; the workers log no traceback
    and no ERROR for what was a pause."""
    if fault.startswith("pgdown") and not private_postgres.available():
        pytest.skip("no initdb/pg_ctl here")
    if fault == "sqlitelock" and os.environ.get("MW_TEST_DATABASE_URL"):
        pytest.skip("the SQLite store's lock; this run's store is PostgreSQL")
    fig = run(fault, redis_url, overrides={}, outage_s=10.0 if fault == "sqlitelock" else None)
    assert_clean(fig)
    assert fig.faults_injected == 1
    assert (fig.tracebacks, fig.errors_logged) == (0, 0)
    assert fig.last_toast_s <= STORE_BACK_S, fig
