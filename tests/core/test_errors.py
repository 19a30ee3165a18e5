"""One root for every error the library raises, in one module, and none also a builtin: a
caller catches "anything memory_worker raises" with `except MemoryWorkerError`, and a shell that
catches ours by name never catches a bug's `KeyError` or `ValueError` with them."""

from __future__ import annotations

import importlib
import pkgutil

import memory_worker
from memory_worker.core.errors import (
    MemoryWorkerError,
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
LIVES_ELSEWHERE: dict[str, str] = {}


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


BUILTIN_KINDS = (LookupError, ValueError, RuntimeError, OSError, TypeError, ArithmeticError)


def test_no_error_of_ours_is_also_a_builtin_so_a_shell_catching_ours_never_catches_a_bug() -> None:
    """A shell answers `except NotFound` with a 404; were NotFound also a LookupError, shells
    would catch LookupError, and a bug's KeyError would answer 404 too (docs/design.md §10.12)."""
    mixed = sorted(
        f"{c.__qualname__} is a {kind.__name__}"
        for c in library_exceptions()
        if issubclass(c, MemoryWorkerError)
        for kind in BUILTIN_KINDS
        if issubclass(c, kind)
    )
    assert not mixed, mixed
