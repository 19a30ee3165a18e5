"""The Celery app: `celery -A memory_worker.tasks.celery_app worker -Q model,embed,...`.

Config comes from `celeryconfig` by module name. Importing this module starts nothing: the
broker is resolved (`memory_worker.ops.broker.url()`, which may start the embedded Redis) when the
app is first configured — the first send, or a worker starting — not at import. Engines are
per process: a prefork child drops what it inherited (SQLAlchemy engines must not cross a fork).
"""

from __future__ import annotations

from typing import Any

from celery import Celery, Task
from celery.signals import beat_init, celeryd_init, worker_init, worker_process_init

from memory_worker.ops import broker
from memory_worker.storage import store
from memory_worker.tasks import startup

app = Celery(
    "memory_worker",
    include=["memory_worker.tasks.pipeline", "memory_worker.tasks.rooms"],
    task_cls="memory_worker.tasks.boundary:QuietTask",  # no memory text in logs or events
)
app.config_from_object("celeryconfig")


@app.on_after_configure.connect
def _resolve_broker(sender: Celery, **_: Any) -> None:
    if not sender.conf.broker_url:  # set explicitly (a test's Redis): keep it
        sender.conf.broker_url = broker.url()


@worker_process_init.connect
def _fresh_engines_after_fork(**_: object) -> None:
    store.forget_inherited()


@celeryd_init.connect
def _check_config(**_: object) -> None:
    startup.check_worker_can_start()  # `celery worker` only: a bad config stops it here
    startup.yield_cores()  # before the pool: prefork children inherit the niceness


@beat_init.connect
def _check_beat_config(**_: object) -> None:
    startup.check_beat_can_start()


@worker_init.connect
def _serve_metrics(**_: object) -> None:
    startup.serve_metrics()


def send_at_once(task: Task, *args: Any) -> None:
    """Publish `task` with no retries, and a full broker's refusal raised at once rather than
    waited for (`ops.broker.impatient`): the app's calls, whose work is in the store already."""
    with broker.impatient():
        task.apply_async(args, retry=False)
