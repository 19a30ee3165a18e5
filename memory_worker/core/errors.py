"""Every error this library raises, in one module: `except MemoryWorkerError` catches them all.

One module, as Celery's `celery.exceptions` and dramatiq's `dramatiq.errors`: a reader sees at
once what can go wrong and which errors a shell may answer. It lives in core's leaf, which
imports only the leaf, so every layer may import it.

No error here also inherits a builtin (`LookupError`, `ValueError`, `RuntimeError`, `OSError`),
so a shell catches what we raise on purpose and nothing else: a `KeyError` or a `ValueError`
from a bug is a 500 with a log line on the page and a traceback in the CLI, never a 404, a
sign-out or its message shown to the user (docs/design.md §10.12). Calling a function with the
wrong type of argument stays a `TypeError`: that is a bug in the caller too.

One kind of exception stays outside it on purpose: `tasks.startup.CannotStart` is an exit, not
an error. It is a `SystemExit` because Celery's signal dispatch catches every `Exception` a
receiver raises and carries on starting the worker; a `MemoryWorkerError` there would be
logged and swallowed, and a worker with a bad config would start.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from memory_worker.core.constants import COUNTDOWN_MAX_S, MEMORY_NOTE_MAX_CHARS, RETURN_LEAD_S


class MemoryWorkerError(Exception):
    """Anything memory_worker raises on purpose."""


# --- a process that cannot start: its settings, its store, its ports ----------------------


class ConfigError(MemoryWorkerError):
    """A setting from the environment is wrong; the message names the variable, on one line."""


class ScopeNotAllowed(ConfigError):
    """MW_MEMORY_SCOPE=follow without a passing leak exam verdict for what is in force: the
    process must not start (the message names the command to run)."""


class StoreNotReady(MemoryWorkerError):
    """The store is reachable but not initialised or not migrated to the newest revision."""


class BadValue(MemoryWorkerError):
    """A value given on the command line that the command cannot use (a file that holds no
    JSON); the message names it and says why (`memory_worker.cli_args`)."""


class UnknownName(BadValue):
    """A persona or process the command was given and the store (or Procfile) does not
    hold; the message lists the ones it does."""


class EmbedderMismatch(MemoryWorkerError):
    """The configured embedder is not the one that made this store's vectors."""


class EmbeddedRedisError(MemoryWorkerError):
    """The embedded Redis could not be started (its log's tail is in the message)."""


class MissingLocalModel(MemoryWorkerError):
    """The package that ships the local model is not installed."""


class CannotListen(MemoryWorkerError):
    """The address is taken or not ours to bind; the message says which and what to do."""


# --- a request or message refused, a thing that is not there ------------------------------


class MalformedMessage(MemoryWorkerError):
    """A task message that does not fit its model; says where, never what it carried."""

    def __init__(self, what: str, error: ValidationError | str):
        if isinstance(error, ValidationError):
            where = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(message)'}: {e['type']}"
                for e in error.errors(include_input=False, include_url=False)[:5]
            )
        else:
            where = error
        super().__init__(f"malformed {what} message ({where})")


class UnknownRoom(MemoryWorkerError):
    """The app named a room the store has never seen."""

    def __init__(self, room_id: str):
        super().__init__(f"unknown room {room_id!r}: no such row in `rooms`")
        self.room_id = room_id


class UnknownUser(MemoryWorkerError):
    """A user id the store does not hold: the page signs that session out."""

    def __init__(self, user_id: int):
        super().__init__(f"unknown user {user_id}")
        self.user_id = user_id


class NotFound(MemoryWorkerError):
    """No such notice or row *for this user*: missing and not theirs answer the same."""

    def __init__(self, what: str, item_id: object, user_id: int):
        super().__init__(f"no {what} {item_id} for user {user_id}")


class NoteTooLong(MemoryWorkerError):
    """The memory note is over the limit; the stored note is left as it was."""

    def __init__(self, length: int, limit: int = MEMORY_NOTE_MAX_CHARS):
        super().__init__(f"memory note is {length} chars; the limit is {limit}")
        self.length = length
        self.limit = limit


class BadRequest(MemoryWorkerError):
    """A web request whose content is wrong (a body that is not a JSON object, a query
    parameter that is not a number): a 400 whose message, written where it is raised, says what
    to send instead and is safe to show."""


class BadCursor(BadRequest):
    """A page cursor the page never gave (forged, another user's or search's, or garbled)."""


class BadSearch(BadRequest):
    """A page search the page will not run: over its length, or holding control characters."""


class ListChanged(MemoryWorkerError):
    """A page walk's next page, asked after a line about the user was closed or reopened since
    the walk began: going on would show a line twice or skip one (a 409; start again)."""


class Refused(MemoryWorkerError):
    """A request refused for its shape (size, speed, origin), answered `status` + `message`."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# --- a model provider (core.model_interfaces) ---------------------------------------------


class ModelError(MemoryWorkerError):
    """Anything a model provider could not do."""


class TransientModelError(ModelError):
    """429, 5xx, a timeout: worth retrying. `retry_after` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class RateLimited(TransientModelError):
    """No slot within `max_wait`; `retry_after` says when ours comes, `slot_ms` (on Redis's
    clock; 0 when none was reserved) is the ticket to present then (`holding`)."""

    def __init__(self, message: str, retry_after: float, slot_ms: int = 0):
        super().__init__(message, retry_after=retry_after)
        self.slot_ms = slot_ms

    def countdown(self) -> float:
        """When the task should come back: a little before its slot, never past the cap."""
        return max(0.0, min(COUNTDOWN_MAX_S, (self.retry_after or 0.0) - RETURN_LEAD_S))


class MalformedAnswer(ModelError):
    """The answer did not validate against the schema.

    The message says what was wrong in the schema's words only (`describe_invalid`): it is
    logged, sent back to the model in the re-ask and kept as a parked spell's reason, where a
    human's delete never reaches. The answer itself, which may quote what someone said, rides
    on `.raw` and nowhere else."""

    def __init__(self, message: str, raw: str | None = None):
        super().__init__(message)
        self.raw = raw


class PermanentModelError(ModelError):
    """A 4xx other than 429, a missing key, a replay miss: retrying will not help."""


class PromptTooLarge(PermanentModelError):
    """The model refused the prompt as too long for its context: ask again with less."""


class ReplayMiss(PermanentModelError):
    """No recorded answer for this request: author one (see `replay_misses_dir`, `add_entry`)."""

    def __init__(
        self,
        message: str,
        *,
        fingerprint: str,
        purpose: str,
        cassette: Path | None,
        request_file: Path | None = None,
    ):
        super().__init__(message)
        self.fingerprint = fingerprint
        self.purpose = purpose
        self.cassette = cassette
        self.request_file = request_file


# --- delivery -----------------------------------------------------------------------------


class ToastNotPublished(MemoryWorkerError):
    """The human's channel could not be told; the toast stays undelivered and is retried."""


class BrokerFull(MemoryWorkerError):
    """The broker refused a write for memory (Redis at its maxmemory) for longer than
    MW_BROKER_FULL_WAIT_S: the work is left to the sweep (`ops.broker.wait_while_full`)."""


class BrokerEvicts(MemoryWorkerError):
    """The broker's maxmemory-policy evicts keys: it would drop queued tasks (`check`)."""


# --- the store ----------------------------------------------------------------------------


class StoreAway(MemoryWorkerError):
    """What a step's retry says it waits for: the store's outage by name, never the statement
    (`tasks.store_step`)."""
