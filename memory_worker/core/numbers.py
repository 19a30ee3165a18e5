"""Numbers from outside, parsed once and strictly: the web's query strings and headers.

`str.isdigit` says yes to "¹", "②" and "٣" (superscripts, circled and Arabic-Indic digits),
which `int` then refuses or reads as another number: a check with it let them through to a 500.
Here a number a client sends is ASCII digits, at most as many as the largest value allowed has,
within its range — or a `BadRequest` naming the parameter. Every number the page reads from a
request comes through `whole_number`.
"""

from __future__ import annotations

from memory_worker.core.errors import BadRequest

ASCII_DIGITS = frozenset("0123456789")


def is_ascii_number(raw: str) -> bool:
    """Pure: `raw` is one or more ASCII digits and nothing else (no sign, space or "¹")."""
    return bool(raw) and set(raw) <= ASCII_DIGITS


def whole_number(raw: str, name: str, lo: int, hi: int) -> int:
    """`raw` as an int in lo..hi; BadRequest naming `name` for anything else. The length is
    checked before `int` reads it, so a million digits cost nothing."""
    if not is_ascii_number(raw) or len(raw) > len(str(hi)):
        raise BadRequest(f"{name} must be a whole number {lo}..{hi}")
    value = int(raw)
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be a whole number {lo}..{hi}")
    return value
