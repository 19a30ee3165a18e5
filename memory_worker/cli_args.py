"""The command line's value types: each value checked where it is parsed.

A bad value ends the command with exit 2 and one line naming the option and what it takes,
never a traceback from deep inside (an `OverflowError` from the socket layer for a port,
a `FileNotFoundError` for a file) nor silence (an empty block for a persona that is not
there). argparse calls the types below; what only the store can judge (is this persona
known?) is `require_known`, called once the store is open.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from memory_worker.core.errors import UnknownName

MAX_PORT = 65_535
_HUMAN = re.compile(r"(?:u:)?([0-9]+)")  # ASCII digits only: int() takes '４２' too
_SLUG = re.compile(r"[^\s:]+")


class _Help(argparse.HelpFormatter):
    """argparse's help, with every command's name on the line of its help: argparse measures
    the command list before indenting it, and put `cassette-answer`'s help on a line of its
    own."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=24)
        self._action_max_length = 22


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line: what was wrong, and where the help is.

    argparse's own way prints the whole usage first (a 99-column line for the top level),
    which buries the one thing the reader needs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free one)."""
    value = _whole(text, "a port")
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: 0 to {MAX_PORT}")
    return value


def positive_count(text: str) -> int:
    """A whole number, 1 or more (a batch, a number of runs)."""
    value = _whole(text, "a count")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a count of 1 or more")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more."""
    return _whole(text, "a count")


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def existing_file(text: str) -> Path:
    """A file that is there and can be read."""
    path = Path(text)
    if not path.is_file():
        said = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text} {said}")
    return path


def human(text: str) -> int:
    """A human's id as the block prints it (`u:42`) or bare (`42`)."""
    found = _HUMAN.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a human's id: 42 or u:42")
    return int(found.group(1))


def slug(text: str) -> str:
    """A persona's or room's id as the store keeps it: no spaces, no ':'."""
    if _SLUG.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an id: no spaces or ':'")
    return text


def require_known(what: str, value: str, known: Iterable[str]) -> None:
    """`value` is one of `known`, exactly (ids are case-sensitive); else `UnknownName`,
    listing the known ones (or saying there are none) and the nearest match."""
    names = sorted(set(known))
    if value in names:
        return
    if not names:
        raise UnknownName(f"unknown {what} {value!r}: there are none")
    near = [n for n in names if n.lower() == value.lower()] or difflib.get_close_matches(
        value, names, n=1
    )
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    raise UnknownName(f"unknown {what} {value!r}{hint}; known: {shown}")


def _whole(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}: a whole number")
    return int(text)
