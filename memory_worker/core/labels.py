"""Labels by construction: every model call's label is fixed before it runs (docs/design.md §12).

Information-flow control, as FIDES applies it to an agent's model calls: the label of what a
computation produces is the meet of the labels of everything it read. Here a label is the set
of humans who may know something, or `PUBLIC` (everyone) — the top of the lattice; the meet is
the intersection. A transcript line's label is the humans who witnessed it *at the time it was
said* — members who had joined, with memory on and this persona not muted then — and a
dispatch's (the news) is public. A spell's window holds lines of one label only, its model
calls are shown only rows whose audience holds that label, and every row it writes gets at
most that label, whatever the model wrote or cited. Nothing here reads model output.

Each line is judged at its own time by its stamp (`Stamp`, `line_stamps`), which the store's
trigger writes in the transaction that stores the line: a line said while its speaker had
memory off or had muted the persona, before the persona joined the room, or while a kit was
mounted never reaches a model; nor does a persona's line that had such a line in view (it
carries what its persona heard).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.rows import concerns

# A label: the humans who may know (a frozenset of user ids), or PUBLIC: everyone.
Label = frozenset[int] | None
PUBLIC: Label = None
NOBODY: Label = frozenset()


def meet(a: Label, b: Label) -> Label:
    """The greatest label below both: what a computation that read both may tell."""
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def meet_all(labels: Iterable[Label]) -> Label:
    out: Label = PUBLIC
    for label in labels:
        out = meet(out, label)
    return out


def within(audience: Label, label: Label) -> bool:
    """True when `audience` is no wider than `label` (everyone in it is in the label)."""
    if label is None:
        return True
    return audience is not None and audience <= label


def row_audience(subject: str, counterpart: str | None, private_to: Sequence[int] | None) -> Label:
    """Who a row may reach, read from the store's columns: a world row its `private_to`
    (None: public); a row about a human, or a promise to one, that human."""
    if subject == SUBJECT_WORLD:
        return None if private_to is None else frozenset(private_to)
    who = concerns(subject, counterpart)
    return NOBODY if who is None else frozenset({who})


def to_json(label: Label) -> list[int] | None:
    return None if label is None else sorted(label)


def from_json(value: Sequence[int] | None) -> Label:
    return None if value is None else frozenset(int(u) for u in value)


# --- a line's stamp ------------------------------------------------------------------------


@dataclass(frozen=True)
class Stamp:
    """What the store stamped a line with, for one persona, in the transaction that stored it
    (`line_stamps`): whether it may reach the persona's model, the room's humans then, and
    its label. Nothing later — a switch, a join, a leave, a delete — changes it."""

    readable: bool
    heard: frozenset[int]
    label: Label

    @classmethod
    def parse(cls, readable: int, heard: str, label: str | None) -> Stamp:
        return cls(
            bool(readable),
            frozenset(int(u) for u in json.loads(heard)),
            None if label is None else frozenset(int(u) for u in json.loads(label)),
        )


# A line with no stamp for a persona (said before it joined the room) never reaches its model.
UNSTAMPED = Stamp(False, frozenset(), NOBODY)


def window_label(stamps: Iterable[Stamp]) -> Label:
    """The meet of the labels of the readable lines: what a call over them may tell. No
    readable line: nobody."""
    labels = [s.label for s in stamps if s.readable]
    return meet_all(labels) if labels else NOBODY


def window_heard(stamps: Sequence[Stamp]) -> frozenset[int]:
    """Who heard a window's lines: the humans of its first readable line (every readable line
    of a window has the same, `one_label_end`), else of its first line."""
    found = [s for s in stamps if s.readable] or list(stamps)
    return found[0].heard if found else frozenset()


def one_label_end(lines: Sequence[tuple[int, Stamp]]) -> int | None:
    """The last line id of the longest run from the start of `lines` (id, stamp; oldest
    first) whose readable lines all have one label and were heard by the same humans: a
    window is cut there, so no call mixes what different people heard (the split costs a
    spell; a meet would cost the rows of whoever is missing from one line). None: no line
    given."""
    if not lines:
        return None
    first: tuple[Label, frozenset[int]] | None = None
    end = lines[0][0]
    for line_id, stamp in lines:
        if stamp.readable:
            key = (stamp.label, stamp.heard)
            if first is None:
                first = key
            elif key != first:
                break
        end = line_id
    return end
