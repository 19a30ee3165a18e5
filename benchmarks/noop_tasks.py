"""The floor the write path is compared with: a chain of six no-op tasks, as many as a spell's
(the quiet event's fan-out and the five steps), one on each of the pipeline's five queues.

Loaded into the benchmark's worker with `--include benchmarks.noop_tasks`; the last task
counts finished chains in Redis.
"""

from __future__ import annotations

from memory_worker.core.constants import QUEUES
from memory_worker.ops import broker
from memory_worker.tasks.celery_app import app

DONE_KEY = "mw:bench:noop-done"


def _noop(payload: dict) -> dict:
    return payload


noops = [app.task(name=f"bench.noop_{q}", queue=q)(_noop) for q in QUEUES]


@app.task(name="bench.noop_done", queue=QUEUES[-1])
def noop_done(payload: dict) -> None:
    broker.client(app.conf.broker_url).incr(DONE_KEY)
