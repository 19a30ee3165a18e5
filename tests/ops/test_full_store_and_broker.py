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

import os
from dataclasses import asdict

import pytest

from benchmarks import faults
from tests.worker import spare_database

pytestmark = [pytest.mark.pipeline, pytest.mark.faults, pytest.mark.slow]
ROOMS = 3
HELD_S = 10.0  # the fault's length: long enough that every room's chain meets it
# Each room says three bursts, each read by one spell: one extract, one embed and one route
# call each, the same in every calm run (faults.run("none")).
CALLS = 3 * 3 * ROOMS


def run(fault: str, redis_url: str | None) -> faults.Figures:
    return faults.run(
        fault,
        rooms=ROOMS,
        redis_url=spare_database(redis_url, 3) if redis_url else None,
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
    assert fig.model_calls == CALLS, nonzero  # no model call paid twice


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
    assert fig.clean and fig.model_calls == CALLS, asdict(fig)
