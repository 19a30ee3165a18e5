"""`--pool solo` (the commit worker), whose stop leaves the running task to the exit."""

from __future__ import annotations

from celery.concurrency.solo import TaskPool as _Solo

from memory_worker.tasks.pools import left_to_the_exit


class Solo(_Solo):
    def terminate_job(self, pid: int | None, signal: int | None = None) -> None:
        left_to_the_exit(pid)
