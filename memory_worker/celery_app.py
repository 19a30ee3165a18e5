"""The Celery app: `celery -A memory_worker.celery_app worker -Q model,embed,...`.

Config comes from `celeryconfig` by module name; the broker from `memory_worker.broker`
(starting the embedded Redis when no URL is set). Engines are per process: a prefork child
drops what it inherited (SQLAlchemy engines must not cross a fork).
"""

from __future__ import annotations

from celery import Celery
from celery.signals import worker_process_init

from memory_worker import broker, store

app = Celery("memory_worker", include=["memory_worker.tasks.pipeline", "memory_worker.tasks.rooms"])
app.config_from_object("celeryconfig")
app.conf.broker_url = broker.url()


@worker_process_init.connect
def _fresh_engines_after_fork(**_: object) -> None:
    store.forget_inherited()
