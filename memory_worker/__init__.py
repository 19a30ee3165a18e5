"""memory_worker: the memory store that lets AI personas remember the humans they talk to.

The package root imports nothing heavy: `memory_worker.reader` must load without Celery,
Redis or a model SDK, so Celery lives in `memory_worker.tasks.celery_app`
(``celery -A memory_worker.tasks.celery_app worker``).
"""

__version__ = "0.1.0"
