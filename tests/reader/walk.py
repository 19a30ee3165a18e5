"""The walk of a call: the stops it makes in the watched modules, in order.

A stop is a call that crosses from one watched module (by default those of
`memory_worker.reader` and `memory_worker.storage`; a commit's walk watches `memory_worker.write`
and storage) into another (a call within a module is no stop; `core` is pure and
left out, and so are the calls a module makes into itself). A stop is a return: the
walk came back to a callee module its caller had called before — the back and forth between
two modules that a plan, made in one call and carried out in one, avoids.
docs/architecture.md's walks of a cold open and of a commit are these lists
(`tests/reader/test_walk.py`, `tests/write/test_commit_walk.py`).
"""

from __future__ import annotations

import re
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

WATCHED = ("memory_worker.reader", "memory_worker.storage")
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def documented(header: str) -> list[str]:
    """The lines of the fenced text block under `header` in docs/architecture.md."""
    text = DOC.read_text()
    block = re.search(re.escape(header) + r".*?```text\n(.*?)```", text, re.S)
    assert block is not None, f"docs/architecture.md has no {header!r} with a text block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


@dataclass(frozen=True)
class Stop:
    caller: str  # the module it came from ("" for the first)
    module: str
    function: str

    def __str__(self) -> str:
        return f"{self.module}.{self.function}"


@dataclass(frozen=True)
class Walk:
    stops: list[Stop]

    @property
    def returns(self) -> int:
        """Stops into a module its caller had already called into: the calls came back."""
        pairs = Counter((s.caller, s.module) for s in self.stops)
        return sum(n - 1 for n in pairs.values())

    def most_calls(self) -> tuple[tuple[str, str], int]:
        """The pair (caller, callee) called most often, and how often."""
        pairs = Counter((s.caller, s.module) for s in self.stops)
        return pairs.most_common(1)[0]


def walk(call: Callable[[], object], watched: tuple[str, ...] = WATCHED) -> Walk:
    """Run `call` on this thread and record its walk through the `watched` packages."""
    stack: list[str] = []
    stops: list[Stop] = []
    me = threading.get_ident()

    def watch(frame: FrameType, event: str, _arg: Any) -> None:
        if threading.get_ident() != me or event not in ("call", "return"):
            return
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith(watched):
            return
        short = module.removeprefix("memory_worker.")
        if event == "return":
            if stack:
                stack.pop()
            return
        caller = stack[-1] if stack else ""
        if caller != short:
            stops.append(Stop(caller, short, frame.f_code.co_name))
        stack.append(short)

    sys.setprofile(watch)
    try:
        call()
    finally:
        sys.setprofile(None)
    return Walk(stops)
