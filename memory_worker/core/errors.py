"""The one root of every error this library raises: `except MemoryWorkerError` catches them all.

It lives in core's leaf, which imports nothing, so every layer may import it. Each error keeps
the standard base that says what kind of failure it is as well (`UnknownRoom` is still a
`LookupError`, `ConfigError` a `ValueError`), so a caller's `except LookupError` still works.

One kind of exception stays outside it on purpose: `tasks.startup.CannotStart` is an exit, not
an error. It is a `SystemExit` because Celery's signal dispatch catches every `Exception` a
receiver raises and carries on starting the worker; a `MemoryWorkerError` there would be
logged and swallowed, and a worker with a bad config would start.
"""

from __future__ import annotations


class MemoryWorkerError(Exception):
    """Anything memory_worker raises on purpose."""
