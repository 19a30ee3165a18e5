"""The plain data every step passes around: lines, rooms, rows, candidates, decisions.

Frozen dataclasses with `to_json`/`from_json` where they travel in a Celery message (JSON only,
docs/design.md §10.5): messages carry ids and candidates, never transcripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from memory_worker.core.constants import HUMAN_PREFIX, SUBJECT_SELF, SUBJECT_WORLD
from memory_worker.core.messages import spell_json

Json = dict[str, Any]  # a JSON object as it travels in a Celery message


def now_iso() -> str:
    """UTC, to the second: every timestamp the store writes."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def stamp(at: str) -> str:
    """An app's timestamp as the store writes its own (`now_iso`): UTC, to the second. The
    sweeps compare these as text, so "not-a-date" or a time without its offset would sort
    anywhere and the line might never be seen: refused, naming the value."""
    try:
        when = datetime.fromisoformat(at)
    except (TypeError, ValueError):
        when = None
    if when is None or when.tzinfo is None:
        raise ValueError(
            f"at: {at!r} is not an ISO 8601 time with its UTC offset "
            "(e.g. 2026-12-02T10:00:00+00:00)"
        )
    return when.astimezone(UTC).replace(microsecond=0).isoformat()


def human_id(member: str) -> int | None:
    """42 for 'u:42'; None for a persona slug, 'self' or 'world'."""
    if member.startswith(HUMAN_PREFIX):
        tail = member[len(HUMAN_PREFIX) :]
        if tail.isdigit():
            return int(tail)
    return None


def human_ref(user_id: int) -> str:
    return f"{HUMAN_PREFIX}{user_id}"


def concerns(subject: str, counterpart: str | None) -> int | None:
    """Whom a row concerns: the human it is about, or for the persona's own promise or open
    loop ('self') the human it is with; None for a world row. The one definition used by the
    audience rule, the ranking's groups, the toasts and the human's controls."""
    if subject == SUBJECT_SELF:
        return human_id(counterpart or "")
    return human_id(subject)


def concerned(
    subject: str, counterpart: str | None, audience: Iterable[int] | None = ()
) -> list[int]:
    """Every human a row concerns: whom it is about (`concerns`), or for a world row, its
    audience (`private_to`: who witnessed its lines; none for a public one) — they get its
    toast, see it on their page and may delete it (for a world row: leave its audience)."""
    if subject == SUBJECT_WORLD:
        return sorted(set(audience or ()))
    uid = concerns(subject, counterpart)
    return [] if uid is None else [uid]


def id_list(value: str | None) -> tuple[int, ...] | None:
    """A JSON list of human ids as stored (`named`, `private_to`), sorted; None for NULL."""
    if value is None:
        return None
    return tuple(sorted({int(u) for u in json.loads(value)}))


def id_json(ids: Iterable[int] | None) -> str | None:
    """Human ids as stored: a sorted JSON list, NULL for None (and for no ids, when `named`)."""
    return None if ids is None else json.dumps(sorted({int(u) for u in ids}))


@dataclass(frozen=True)
class Line:
    """One transcript line; `speaker` is 'u:42' or a persona slug."""

    id: int
    room_id: str
    speaker: str
    text: str
    created: str


@dataclass(frozen=True)
class Room:
    id: str
    kind: str  # 'private' | 'group'
    incognito: bool = False
    kit_mounted: bool = False
    archived: bool = False
    topic: str | None = None
    topic_embedding: bytes | None = None

    def is_private_chat(self) -> bool:
        return self.kind == "private"


@dataclass
class Row:
    """A persona_memory row (docs/design.md §1). `confidence` is set by the audience rule."""

    id: int
    persona: str
    subject: str
    counterpart: str | None
    witnessed: list[int]
    room_id: str
    kind: str
    text: str
    importance: int
    valid_from: str | None
    valid_to: str | None
    closed_by: int | None
    evidence: list[int]
    created: str
    last_recalled: str | None = None
    recall_count: int = 0
    embedding: bytes | None = None
    confidence: bool = False
    named: tuple[int, ...] = ()  # humans the text names besides whom it concerns
    private_to: tuple[int, ...] | None = None  # a world row's audience: its witnesses; None: public

    @classmethod
    def from_mapping(cls, m: Mapping[Any, Any]) -> Row:
        """Build from a SQLAlchemy row mapping of persona_memory."""
        return cls(
            id=m["id"],
            persona=m["persona"],
            subject=m["subject"],
            counterpart=m["counterpart"],
            witnessed=json.loads(m["witnessed"] or "[]"),
            room_id=m["room_id"],
            kind=m["kind"],
            text=m["text"],
            importance=m["importance"],
            valid_from=m["valid_from"],
            valid_to=m["valid_to"],
            closed_by=m["closed_by"],
            evidence=json.loads(m["evidence"] or "[]"),
            created=m["created"],
            last_recalled=m["last_recalled"],
            recall_count=m["recall_count"] or 0,
            embedding=m["embedding"],
            named=id_list(m.get("named")) or (),
            private_to=id_list(m.get("private_to")),
        )


@dataclass(frozen=True)
class Candidate:
    """What extraction proposes, after the guards: one sentence about one subject."""

    subject: str
    kind: str
    text: str
    importance: int
    evidence: tuple[int, ...]
    valid_from: str | None = None
    counterpart: str | None = None
    embedding: str | None = None  # base64 of the int8 vector, filled by the embed step

    def to_json(self) -> Json:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        return d

    @classmethod
    def from_json(cls, d: Json) -> Candidate:
        return cls(**{**d, "evidence": tuple(d["evidence"])})


@dataclass(frozen=True)
class Decision:
    """The router's verdict for one candidate, with the neighbour's real row id resolved."""

    candidate: int  # index into the spell's candidates
    event: str  # ADD | UPDATE | CLOSE | NONE
    old_row_id: int | None = None

    def to_json(self) -> Json:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Json) -> Decision:
        return cls(**d)


def _plan_copy(plan: Json) -> Json:
    """A plan's message (`write.plan.Plan.to_json`) copied down to its lists."""
    out = {k: list(v) if isinstance(v, list) else v for k, v in plan.items()}
    out["steps"] = [
        {k: list(v) if isinstance(v, list) else v for k, v in step.items()}
        for step in plan.get("steps", [])
    ]
    return out


@dataclass
class Spell:
    """One persona's pass over the lines since its cursor: the message the chain carries.

    Each step returns a new Spell with its part filled in; `parked`/`skipped` short-circuit
    the rest of the chain while still reaching the commit, which records the outcome.
    """

    persona: str
    room_id: str
    after_line_id: int  # the cursor when the spell began
    last_line_id: int  # the last line of the slice: with persona and room, the spell's key
    present: list[int] = field(default_factory=list)  # humans the model may write about
    witnessed: list[int] = field(default_factory=list)  # every human in the room
    # The label of its model calls (`core.labels`): who heard every line it reads, with their
    # switches then; None: every line a dispatch (public). Empty: nobody, so nothing is written.
    label: list[int] | None = field(default_factory=list)
    candidates: list[Json] = field(default_factory=list)  # Candidate.to_json()
    decisions: list[Json] = field(default_factory=list)  # Decision.to_json()
    seen_open_rows: str | None = None  # fingerprint of the open rows the router saw
    seen_as_of: str | None = None  # when the router read them (`write.view.AsOf`)
    plan: Json | None = None  # what the commit is to write (`write.plan.Plan.to_json`)
    reroutes: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # candidates dropped, by guard code
    skipped: str | None = None
    parked: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    model_calls: int = 0  # sent for this spell, re-asks and embeddings included (the log)
    began: float = field(default=0.0, compare=False)  # epoch s at begin: the log's duration
    inflight: str | None = None  # the token of its claim (`memory_worker.ops.inflight`)
    renewed: float = field(default=0.0, compare=False)  # epoch s the claim was taken or renewed

    @property
    def key(self) -> str:
        return f"{self.persona}/{self.room_id}/{self.last_line_id}"

    @property
    def done(self) -> bool:
        """True when nothing is left for the model steps: skipped or parked."""
        return bool(self.skipped or self.parked)

    def to_json(self) -> Json:
        """The message: every field, its lists and candidate/decision dicts copied (what
        `asdict` gives, without its deep walk: each step sends one)."""
        d = dict(self.__dict__)
        d["present"], d["witnessed"] = list(self.present), list(self.witnessed)
        d["label"] = None if self.label is None else list(self.label)
        d["candidates"] = [{**c, "evidence": list(c["evidence"])} for c in self.candidates]
        d["decisions"] = [dict(x) for x in self.decisions]
        d["plan"] = None if self.plan is None else _plan_copy(self.plan)
        d["dropped"] = dict(self.dropped)
        return d

    @classmethod
    def from_json(cls, d: Json) -> Spell:
        """The spell a message carries, checked field by field (`messages.SpellMessage`):
        MalformedMessage for anything that does not fit, before any of it is used."""
        return cls(**spell_json(d))
