"""Celery's thread and solo pools, with a stop that does not log a false CRITICAL.

At a stop, Celery cancels the tasks still running (`cancel_active_requests`) by asking the
pool to kill each one's process — which a thread or the worker's own process cannot be:
the base pool raises NotImplementedError ("TaskPool does not implement kill_job"), logged
CRITICAL on every stop. Nothing needs killing here: the task's message is unacked
(acks_late) and goes back to the queue as the worker exits, and a model call in flight ends
by its own HTTP timeout. The Procfile selects these through Celery's own hook for a pool of
one's own: CELERY_CUSTOM_WORKER_POOL=memory_worker.tasks.pools.threads:Threads and `--pool custom`.
Each pool lives in a module named as Celery names its own (`solo`, `threads`): a worker's
banner shows that name beside its concurrency.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def left_to_the_exit(pid: int | None) -> None:
    log.info("a task still running at the stop is left to the exit; its message is requeued")
