"""The plan of a commit: what a spell's decisions write, close and fold, as plain data.

The route step makes it from what it read before its call (`commit_checks.route_facts`) and
the spell carries it (`rows.Spell.plan`); under the writer lock the commit reads the same
facts again (`commit_checks.check`) and makes the plan again with the one it was handed as
its bound (`make(..., bound=...)`), then carries it out step by step. The bound only narrows: a step
the handed plan lacks is not taken, its audience is met with the handed one, a step the
handed plan put over today's cap stays over it, and the humans a text names only grow. What
a step may close (a row shown, open and of the same concern) and the copies it folds are
found again from the facts of the moment, never taken from the message.

Pure: every fact comes in as an argument (docs/design.md §2.4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_worker.core import labels, provenance
from memory_worker.core.constants import SUBJECT_WORLD
from memory_worker.core.labels import Label
from memory_worker.core.rows import Candidate, Decision, concerns
from memory_worker.storage.memories import OpenRow
from memory_worker.write import copies, guards, route

WRITES = ("ADD", "UPDATE")


@dataclass(frozen=True)
class Step:
    """One decision as the commit carries it out.

    ADD/UPDATE: the candidate's row, written when `capped` (today's cap lets it through) and
    not `held` (the same sentence is open already for everyone it reaches); it closes the
    narrower copies in `folds` and, for an UPDATE, `old_row_id` (the row it replaces, when it
    may change it). CLOSE: closes `old_row_id`."""

    candidate: int  # index into the spell's candidates
    event: str  # ADD | UPDATE | CLOSE
    old_row_id: int | None  # the row it replaces or closes; None: none it may change
    audience: Label  # who its row may reach
    named: tuple[int, ...] = ()  # the humans its text names besides whom it concerns
    capped: bool = True
    held: bool = False
    folds: tuple[int, ...] = ()  # narrower copies of its sentence it closes (`row_of_step`)
    # What the commit does, from the above: it writes its row (closing its folds and the row
    # it replaces), or the row a CLOSE closes.
    writes: bool = field(init=False, compare=False)
    closes: int | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        live = self.audience != labels.NOBODY
        writes = live and self.event in WRITES and self.capped and not self.held
        object.__setattr__(self, "writes", writes)
        closes = self.old_row_id if live and self.event == "CLOSE" else None
        object.__setattr__(self, "closes", closes)

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "event": self.event,
            "old_row_id": self.old_row_id,
            "audience": labels.to_json(self.audience),
            "named": list(self.named),
            "capped": self.capped,
            "held": self.held,
            "folds": list(self.folds),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Step:
        return cls(
            candidate=int(d["candidate"]),
            event=str(d["event"]),
            old_row_id=d.get("old_row_id"),
            audience=labels.from_json(d.get("audience", [])),
            named=tuple(d.get("named", ())),
            capped=bool(d.get("capped", True)),
            held=bool(d.get("held", False)),
            folds=tuple(d.get("folds", ())),
        )


@dataclass(frozen=True)
class Plan:
    """A spell's steps in order, and what they were made with: the label of its lines as the
    store stamped them, who heard them, and of those the humans its rows may reach."""

    label: Label
    reach: Label
    witnessed: tuple[int, ...]
    read_through: int  # the room's cursor when it was made
    steps: tuple[Step, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "label": labels.to_json(self.label),
            "reach": labels.to_json(self.reach),
            "witnessed": list(self.witnessed),
            "read_through": self.read_through,
            "steps": [s.to_json() for s in self.steps],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Plan:
        return cls(
            label=labels.from_json(d.get("label", [])),
            reach=labels.from_json(d.get("reach", [])),
            witnessed=tuple(d.get("witnessed", ())),
            read_through=int(d.get("read_through", 0)),
            steps=tuple(Step.from_json(s) for s in d.get("steps", ())),
        )


@dataclass(frozen=True)
class Facts:
    """What a plan is made from, read in one transaction (`commit_checks`)."""

    candidates: Sequence[Candidate]
    label: Label  # the lines' label, as the store stamped them
    reach: Label  # of it, the humans who may still be reached (revocation, switches)
    witnessed: frozenset[int]
    read_through: int
    shown: Mapping[int, OpenRow]  # the open rows of the router's view the decisions name
    already_today: Mapping[str, int]  # rows written today, per cap key
    people: Mapping[int, str]  # humans a text may name (id → name)
    same: copies.Copies  # open rows of the candidates' sentences, every audience


@dataclass
class _Open:
    """The rows a plan being made may still change, and the copies as its steps leave them."""

    shown: dict[int, OpenRow]
    same: copies.Copies = field(default_factory=copies.Copies)


def make(facts: Facts, decisions: Sequence[Decision], bound: Sequence[Step] | None = None) -> Plan:
    """The plan of `decisions` over `facts`; with `bound` (one step per decision: the plan the
    commit was handed), never wider than it. Decisions citing only lines the cursor has passed
    are a newer spell's call and make no step, nor does NONE; a row that reaches nobody makes
    a step that does nothing (it still counts towards today's cap, as it always did)."""
    cands = facts.candidates
    live = [
        (d, None if bound is None else bound[i])
        for i, d in enumerate(decisions)
        if d.event in (*WRITES, "CLOSE") and _cites_unread(cands[d.candidate], facts.read_through)
    ]
    writing = [n for n, (d, _) in enumerate(live) if d.event in WRITES]
    over = guards.over_caps([cands[live[n][0].candidate] for n in writing], facts.already_today)
    capped = {n for k, n in enumerate(writing) if k not in over}
    named_each = guards.humans_named_each(
        [
            (c.text, c.subject, c.counterpart)
            for c in (cands[live[n][0].candidate] for n in writing)
        ],
        facts.people,
    )
    named_of = dict(zip(writing, named_each, strict=True))
    state = _Open(
        dict(facts.shown), copies.Copies({k: list(v) for k, v in facts.same.by_key.items()})
    )
    steps: list[Step] = []
    for n, (d, limit) in enumerate(live):
        c = cands[d.candidate]
        audience = _audience(c, facts.reach)
        if limit is not None:
            audience = labels.meet(audience, limit.audience)
        if audience == labels.NOBODY:  # nobody left who heard it and lets the persona remember it
            steps.append(Step(d.candidate, d.event, None, audience))
            continue
        if d.event == "CLOSE":
            may = _may_change(state.shown, d.old_row_id, c, audience)
            if may:
                state.shown.pop(d.old_row_id or 0, None)
            steps.append(Step(d.candidate, "CLOSE", d.old_row_id if may else None, audience))
            continue
        named = named_of[n]
        if limit is not None:
            named |= set(limit.named)
        ok = n in capped and (limit is None or limit.capped)
        step = _write(state, facts, d, c, audience, tuple(sorted(named)), ok, len(steps))
        steps.append(step)
    return Plan(
        facts.label, facts.reach, tuple(sorted(facts.witnessed)), facts.read_through, tuple(steps)
    )


def _write(
    state: _Open,
    facts: Facts,
    d: Decision,
    c: Candidate,
    audience: Label,
    named: tuple[int, ...],
    capped: bool,
    index: int,
) -> Step:
    """An ADD or UPDATE's step: over today's cap, it writes nothing; held (the same sentence
    open already for everyone it reaches), nothing either; else the row, closing the
    narrower copies of its sentence and, for an UPDATE, the row it replaces."""
    old = d.old_row_id
    replaces = d.event == "UPDATE" and _may_change(state.shown, old, c, audience)
    kept = old if replaces else None
    if not capped:
        return Step(d.candidate, d.event, kept, audience, named, capped=False)
    replaced = state.shown[old].text if replaces and old else None
    found = state.same.take(c, audience, facts.witnessed, row_of_step(index), replaced)
    if found.held:
        return Step(d.candidate, d.event, kept, audience, named, held=True)
    folds = tuple(copy.id for copy in found.narrower)
    for row_id in (*folds, kept):
        if row_id is not None:
            state.shown.pop(row_id, None)
    return Step(d.candidate, d.event, kept, audience, named, folds=folds)


def row_of_step(index: int) -> int:
    """How a fold names the row an earlier step of the plan writes (its id is not known
    until then): -1 for the first step's, -2 for the second's, …."""
    return -1 - index


def _audience(c: Candidate, reach: Label) -> Label:
    """Who a candidate's row may reach, from the call's label alone (`reach`: the label, of
    it those who still allow the persona): a world row's audience is the label itself (public
    only when every line the call read was a dispatch); a row about a human, or a promise to
    one, reaches that human when they are in it. `NOBODY`: it is not written."""
    if c.subject == SUBJECT_WORLD:
        return reach
    who = concerns(c.subject, c.counterpart)
    return (
        frozenset({who})
        if who is not None and labels.within(frozenset({who}), reach)
        else labels.NOBODY
    )


def _may_change(
    shown: Mapping[int, OpenRow], row_id: int | None, c: Candidate, audience: Label
) -> bool:
    """The router may UPDATE or CLOSE only an open row it was shown, about what `c` is about,
    and a world row only when its audience is the new row's (`provenance.may_change`)."""
    row = None if row_id is None else shown.get(row_id)
    if row is None or not route.same_concern(row, c):
        return False
    target = labels.from_json(row.private_to)
    return row.subject != SUBJECT_WORLD or provenance.may_change(target, audience)


def _cites_unread(c: Candidate, read_through: int) -> bool:
    """A candidate whose every evidence line a newer spell already read is that spell's call."""
    return not c.evidence or max(c.evidence) > read_through
