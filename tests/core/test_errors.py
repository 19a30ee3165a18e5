"""One root for every error the library raises: a caller can catch "anything memory_worker
raises" with `except MemoryWorkerError`, and still catch each by the standard kind it was."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import memory_worker
from memory_worker.core.errors import (
    CannotListen,
    ConfigError,
    MemoryWorkerError,
    NotFound,
    UnknownRoom,
)
from memory_worker.tasks.startup import CannotStart

# Exits, not errors: raised to stop a process where a library catches every Exception.
# Each says why it cannot derive from MemoryWorkerError (an Exception).
EXITS = {
    CannotStart: "Celery's signal dispatch catches every Exception a receiver raises and "
    "carries on starting the worker; only a SystemExit stops a worker with a bad config "
    "(tests/ops/test_operations.py: as an Exception, the worker started and ran)",
}


def library_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in the package: each module imported, then every
    subclass of BaseException whose module is one of ours (nested ones included)."""
    for module in pkgutil.walk_packages(memory_worker.__path__, "memory_worker."):
        importlib.import_module(module.name)
    found: set[type[BaseException]] = set()
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                todo.append(sub)
                found.add(sub)
    return {c for c in found if c.__module__.split(".")[0] == "memory_worker"}


def test_every_exception_the_library_defines_derives_from_memory_worker_error() -> None:
    classes = library_exceptions()
    assert len(classes) >= 20, f"the walk found only {sorted(c.__name__ for c in classes)}"
    outside = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if c not in EXITS and not issubclass(c, MemoryWorkerError)
    )
    assert not outside, f"not derived from core.errors.MemoryWorkerError: {outside}"


# Errors defined outside core/errors.py, each with its reason.
LIVES_ELSEWHERE = {
    "memory_worker.reader.cache_loader.NotHeld": "a signal inside the reader's cold path, "
    "raised and caught there, never seen by a caller",
}


def test_every_error_lives_in_core_errors_so_a_reader_finds_them_together() -> None:
    scattered = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in library_exceptions()
        if issubclass(c, MemoryWorkerError) and c.__module__ != "memory_worker.core.errors"
    )
    assert scattered == sorted(LIVES_ELSEWHERE), f"define these in core/errors.py: {scattered}"


def test_the_exits_stay_exits_that_no_except_exception_swallows() -> None:
    for exit_class in EXITS:
        assert issubclass(exit_class, SystemExit)
        assert not issubclass(exit_class, Exception)


@pytest.mark.parametrize(
    "error,kind",
    [
        (UnknownRoom("dm-nobody"), LookupError),
        (NotFound("row", 7, 42), LookupError),
        (ConfigError("MW_MODEL_TIMEOUT_MS: must be > 0"), ValueError),
        (CannotListen("127.0.0.1:8000 is taken"), OSError),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.__name__,
)
def test_an_error_is_caught_as_the_library_s_and_as_the_standard_kind_it_was(
    error: BaseException, kind: type[BaseException]
) -> None:
    with pytest.raises(MemoryWorkerError):
        raise error
    with pytest.raises(kind):
        raise error
