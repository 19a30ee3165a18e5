"""The task boundary: what comes in is checked, what goes out to logs and events says nothing.

In: every task parses its message with `memory_worker.core.messages` before anything runs; a
message that does not fit is refused with one clear log line (which fields, never their
values) and changes nothing — `reject` logs it and ends the task (and its chain) there.

Out: a task's arguments and result are what someone said and what a persona remembers (the
chain passes candidates from step to step). Celery would print them in the worker's INFO log
("succeeded in 0.1s: {...}") and ship them in task events to Flower, where no delete reaches.
`QuietTask`, the base of every task, sends `argsrepr`/`kwargsrepr` of ids and counts only
(`describe`) and keeps results out of logs and events (`resultrepr_maxsize = 0`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NoReturn

from celery import Task
from celery.exceptions import Ignore

from memory_worker.core.errors import MalformedMessage

log = logging.getLogger(__name__)

_SHORT_STR = 80  # a room id or a slug; anything longer is described by its length


def describe(value: Any) -> str:
    """A task argument as logs and events may show it: ids and counts, never text."""
    if isinstance(value, Mapping):
        if "spell" in value and isinstance(value["spell"], Mapping):
            rows = value.get("row_ids")
            count = len(rows) if isinstance(rows, list) else "?"
            return f"<{describe(value['spell'])[1:-1]}; {value.get('status')}, {count} rows>"
        if {"persona", "room_id", "last_line_id"} <= value.keys():
            cands, decs = value.get("candidates"), value.get("decisions")
            return (
                f"<spell {value['persona']}/{value['room_id']}/{value['last_line_id']}: "
                f"{len(cands) if isinstance(cands, list) else '?'} candidates, "
                f"{len(decs) if isinstance(decs, list) else '?'} decisions>"
            )
        return "{" + ", ".join(f"{k}: {describe(v)}" for k, v in list(value.items())[:8]) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe(v) for v in value[:8]) + "]"
    if isinstance(value, str):
        return repr(value) if len(value) <= _SHORT_STR else f"<str of {len(value)} chars>"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    return f"<{type(value).__name__}>"


class QuietTask(Task):
    """The base of every task: arguments shown as `describe` shows them, results not at all."""

    abstract = True
    resultrepr_maxsize = 0  # the worker's "succeeded" line and task-succeeded events

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        options["argsrepr"] = describe(list(args or ()))
        options["kwargsrepr"] = describe(dict(kwargs or {}))
        return super().apply_async(args, kwargs, **options)


def reject(task_name: str, error: MalformedMessage) -> NoReturn:
    """Refuse a malformed message: one clear log line, nothing changed, the chain ends."""
    log.error("%s: %s; rejected, nothing changed", task_name, error)
    raise Ignore()
