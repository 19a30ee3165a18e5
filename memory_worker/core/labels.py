"""Labels by construction: every model call's label is fixed before it runs (docs/design.md §12).

Information-flow control, as FIDES applies it to an agent's model calls: the label of what a
computation produces is the meet of the labels of everything it read. Here a label is the set
of humans who may know something, or `PUBLIC` (everyone) — the top of the lattice; the meet is
the intersection. A transcript line's label is the humans who witnessed it *at the time it was
said* — members who had joined, with memory on and this persona not muted then — and a
dispatch's (the news) is public. A spell's window holds lines of one label only, its model
calls are shown only rows whose audience holds that label, and every row it writes gets at
most that label, whatever the model wrote or cited. Nothing here reads model output.

Switches are judged at the time of each line, from their history (`switch_log`, kept by the
store's triggers: each change with the last line id of the store when it took effect). A line
said while its speaker had memory off or had muted the persona, before the persona joined the
room, or while a kit was mounted never reaches a model.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from memory_worker.core.constants import DISPATCH_PREFIX
from memory_worker.core.rows import human_id

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


def to_json(label: Label) -> list[int] | None:
    return None if label is None else sorted(label)


def from_json(value: Sequence[int] | None) -> Label:
    return None if value is None else frozenset(int(u) for u in value)


# --- switches at the time of a line ---------------------------------------------------------


@dataclass(frozen=True)
class Flip:
    """One change of a switch: from `was` to `now`, for the lines after `after_line`."""

    after_line: int
    was: bool
    now: bool


def state_at(flips: Sequence[Flip], line_id: int, current: bool) -> bool:
    """The switch's value when line `line_id` was said: the latest flip before it, else the
    value the first flip after it started from, else its value now. `flips` in the order they
    happened."""
    before = [f for f in flips if f.after_line < line_id]
    if before:
        return before[-1].now
    return flips[0].was if flips else current


@dataclass(frozen=True)
class LineTime:
    """What decides a line's label and whether it may reach a model, for one persona in one
    room: the members and when they joined, the switches now and their history."""

    persona: str
    joined: Mapping[int, int]  # human member → the room's last line id when they joined
    persona_since: int  # the room's last line id when the persona joined (0: founding)
    memory_on: Mapping[int, bool]  # now; a human missing counts as off
    muted: Collection[int]  # now: who muted this persona
    kit_mounted: bool  # now
    memory_flips: Mapping[int, Sequence[Flip]] = field(default_factory=dict)
    mute_flips: Mapping[int, Sequence[Flip]] = field(default_factory=dict)
    kit_flips: Sequence[Flip] = ()

    def allows(self, human: int, line_id: int) -> bool:
        """Did `human` let the persona remember them when line `line_id` was said?"""
        on = state_at(self.memory_flips.get(human, ()), line_id, self.memory_on.get(human, False))
        muted = state_at(self.mute_flips.get(human, ()), line_id, human in self.muted)
        return on and not muted

    def witnesses(self, line_id: int) -> frozenset[int]:
        """The members who heard line `line_id` and let the persona remember them then."""
        return frozenset(
            u for u, since in self.joined.items() if since < line_id and self.allows(u, line_id)
        )

    def readable(self, line_id: int, speaker: str) -> bool:
        """May this line reach the persona's model at all? Not when said before the persona
        joined, while a kit was mounted, or by a human who was not a member then or did not
        let the persona remember them then (a persona's own lines and dispatches pass)."""
        if line_id <= self.persona_since:
            return False
        if state_at(self.kit_flips, line_id, self.kit_mounted):
            return False
        who = human_id(speaker)
        if who is None:
            return True
        since = self.joined.get(who)
        return since is not None and since < line_id and self.allows(who, line_id)

    def label(self, line_id: int, speaker: str) -> Label:
        """A readable line's label: public for a dispatch, else its witnesses then."""
        if speaker.startswith(DISPATCH_PREFIX):
            return PUBLIC
        return self.witnesses(line_id)


def window_label(time: LineTime, lines: Iterable[tuple[int, str]]) -> Label:
    """The meet of the labels of the readable lines of (id, speaker): what a call over them
    may tell. No readable line: nobody."""
    labels = [time.label(i, who) for i, who in lines if time.readable(i, who)]
    return meet_all(labels) if labels else NOBODY


def one_label_end(time: LineTime, lines: Sequence[tuple[int, str]]) -> int | None:
    """The last line id of the longest run from the start of `lines` (id, speaker; oldest
    first) whose readable lines all have one label: a window is cut there, so no call mixes
    what different people heard (the split costs a spell; a meet would cost the rows of
    whoever is missing from one line). None: no line given."""
    if not lines:
        return None
    first: Label | str = "unset"
    end = lines[0][0]
    for line_id, speaker in lines:
        if time.readable(line_id, speaker):
            label = time.label(line_id, speaker)
            if first == "unset":
                first = label
            elif label != first:
                break
        end = line_id
    return end
