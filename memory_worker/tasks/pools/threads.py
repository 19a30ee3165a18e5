"""`--pool threads`, whose stop hands running tasks back instead of failing to kill them."""

from __future__ import annotations

from celery.concurrency.thread import TaskPool as _Threads

from memory_worker.tasks.pools import left_to_the_exit


class Threads(_Threads):
    def terminate_job(self, pid: int | None, signal: int | None = None) -> None:
        left_to_the_exit(pid)
