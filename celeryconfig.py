"""Celery settings for memory_worker (loaded by name: `app.config_from_object("celeryconfig")`).

The broker URL is not here: `memory_worker.ops.broker.url()` resolves it (REDIS_URL, or the
embedded Redis). Every choice below keeps a contract of docs/design.md §10 or avoids a trap of §14.
"""

from celery.schedules import crontab
from kombu import Exchange, Queue

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import (
    QUEUE_COMMIT,
    QUEUE_EMBED,
    QUEUE_EVENTS,
    QUEUE_MODEL,
    QUEUE_NOTIFY,
    QUEUES,
    SWEEP_HOUR_UTC,
    VISIBILITY_TIMEOUT_S,
)

# Messages are JSON, never pickle.
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
event_serializer = "json"

# Any task may run twice: ack after the work, requeue if the worker dies mid-task.
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1

# Chains pass results in their messages; nothing reads a result backend.
task_ignore_result = True
result_backend = None

# kombu's Redis transport with a close that survives the broker's death (a worker holding
# unacked messages exited with it) and an embedded broker started again by whoever finds it
# gone: memory_worker/ops/transport.py. It serves redis://, rediss:// and unix:// alike.
broker_transport = "memory_worker.ops.transport:Transport"
# Redis redelivers an unacked message after this; every countdown stays far below it.
broker_transport_options = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
broker_connection_retry_on_startup = True
broker_connection_max_retries = None  # a broker that went away is waited for, not given up on

# A stop hands unfinished work back quickly: with REMAP_SIGTERM=SIGQUIT (the Procfile sets it)
# SIGTERM starts a soft shutdown — running tasks get MW_WORKER_SOFT_SHUTDOWN_S (10 s), then the
# worker cancels them and their messages go back to the queue (acks_late), as do held ETA retries.
worker_soft_shutdown_timeout = settings_mod.current_or_exit().worker_soft_shutdown_s


class _HoldingWork:
    """Truthy while this worker holds a task: running, or waiting on its ETA (a retry's
    countdown). Celery sleeps the whole soft-shutdown timeout whenever this setting is true,
    so a plain True made every idle stop wait it out; held ETA tasks still get the wait their
    hand-back needs (Celery's own advice for this setting)."""

    def __bool__(self) -> bool:
        from celery.worker import state

        return bool(state.active_requests or state.scheduled_requests)


worker_enable_soft_shutdown_on_idle = _HoldingWork()

# Queues by the resource they wait on.
task_queues = [Queue(q, Exchange(q, type="direct"), routing_key=q) for q in QUEUES]
task_default_queue = QUEUE_EVENTS
task_routes = {
    "memory_worker.extract": {"queue": QUEUE_MODEL},
    "memory_worker.route": {"queue": QUEUE_MODEL},
    "memory_worker.embed": {"queue": QUEUE_EMBED},
    "memory_worker.room_topic": {"queue": QUEUE_EMBED},
    "memory_worker.reembed_user": {"queue": QUEUE_EMBED},
    "memory_worker.commit": {"queue": QUEUE_COMMIT},
    "memory_worker.deliver_toasts": {"queue": QUEUE_NOTIFY},
    "memory_worker.on_room_quiet": {"queue": QUEUE_EVENTS},
    "memory_worker.sweep": {"queue": QUEUE_EVENTS},
    "memory_worker.sweep_recent": {"queue": QUEUE_EVENTS},
}

# A publish (the next step of a chain, a fan-out, a retry) waits out a short broker outage:
# kombu retries it for ~30 s before the task fails and retries itself.
task_publish_retry = True
task_publish_retry_policy = {
    "max_retries": 10,
    "interval_start": 0.2,
    "interval_step": 1.0,
    "interval_max": 5.0,
}

# The sweeps: the queue is not the source of truth, the cursors and the outbox are. Their
# cadence and what each looks at: docs/design.md §10.1.
timezone = "UTC"
beat_schedule = {
    "frequent-sweep": {
        "task": "memory_worker.sweep_recent",
        "schedule": settings_mod.current_or_exit().sweep_every_s,  # MW_SWEEP_EVERY_S
    },
    "daily-sweep": {
        "task": "memory_worker.sweep",
        "schedule": crontab(hour=SWEEP_HOUR_UTC, minute=0),
    },
}

worker_send_task_events = True  # Flower watches the write jobs
task_send_sent_event = True
