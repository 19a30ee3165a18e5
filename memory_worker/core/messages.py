"""Every task message, typed: what may arrive at a task is checked before anything runs.

A queue message is input like any other (docs/design.md §10.5, §10.12): a commit whose
`last_line_id` is "abc" must not reach the store, where SQLite would keep the text in an INTEGER
column and stop the sweep for good. Each task parses its message with these models; a message
that does not fit is `MalformedMessage`, whose text names the fields and what is wrong with them
— never their values, which may be what someone said.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memory_worker.core.constants import IMPORTANCE_MAX, IMPORTANCE_MIN, TEXT_MAX_CHARS, Event, Kind
from memory_worker.core.errors import MalformedMessage

LineId = Annotated[StrictInt, Field(ge=0)]
UserId = Annotated[StrictInt, Field(ge=1)]
Count = Annotated[StrictInt, Field(ge=0)]
Id = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CandidateMessage(_Strict):
    subject: Id
    kind: Kind
    text: Annotated[StrictStr, Field(min_length=1, max_length=TEXT_MAX_CHARS)]
    importance: Annotated[StrictInt, Field(ge=IMPORTANCE_MIN, le=IMPORTANCE_MAX)]
    evidence: list[LineId]
    valid_from: StrictStr | None = None
    counterpart: Id | None = None
    embedding: StrictStr | None = None


class DecisionMessage(_Strict):
    candidate: Count
    event: Event
    old_row_id: Annotated[StrictInt, Field(ge=1)] | None = None


class StepMessage(_Strict):
    """A step of a commit's plan (`write.plan.Step`)."""

    candidate: Count
    event: Literal["ADD", "UPDATE", "CLOSE"]
    old_row_id: Annotated[StrictInt, Field(ge=1)] | None = None
    audience: list[UserId] | None = []
    named: list[UserId] = []
    capped: StrictBool = True
    held: StrictBool = False
    folds: list[StrictInt] = []  # a row id, or -1 - i: the row step i writes


class PlanMessage(_Strict):
    """A commit's plan (`write.plan.Plan`): an upper bound the commit checks, never trusts."""

    label: list[UserId] | None = []
    reach: list[UserId] | None = []
    witnessed: list[UserId] = []
    read_through: LineId = 0
    steps: list[StepMessage] = []


class SpellMessage(_Strict):
    """`rows.Spell` as it travels between the chain's steps (a field added to Spell must be
    added here too: tests/core/test_messages.py checks they match)."""

    persona: Id
    room_id: Id
    after_line_id: LineId
    last_line_id: LineId
    present: list[UserId] = []
    witnessed: list[UserId] = []
    label: list[UserId] | None = []
    candidates: list[CandidateMessage] = []
    decisions: list[DecisionMessage] = []
    seen_open_rows: StrictStr | None = None
    seen_as_of: Annotated[StrictStr, Field(max_length=200)] | None = None
    plan: PlanMessage | None = None
    reroutes: Count = 0
    dropped: dict[StrictStr, Count] = {}
    skipped: StrictStr | None = None
    parked: StrictStr | None = None
    tokens_in: Count = 0
    tokens_out: Count = 0
    model_calls: Count = 0
    began: Annotated[float, Field(ge=0)] = 0.0
    inflight: StrictStr | None = None
    renewed: Annotated[float, Field(ge=0)] = 0.0

    @field_validator("plan")
    @classmethod
    def _steps_name_candidates(cls, plan: PlanMessage | None, info: ValidationInfo) -> Any:
        carried = len(info.data.get("candidates", ()))
        if plan is not None and any(s.candidate >= carried for s in plan.steps):
            raise ValueError("a step names a candidate the spell does not carry")
        return plan

    @model_validator(mode="after")
    def _lines_and_decisions_agree(self) -> SpellMessage:
        if self.last_line_id <= self.after_line_id:
            raise ValueError("last_line_id must be after after_line_id")
        if any(d.candidate >= len(self.candidates) for d in self.decisions):
            raise ValueError("a decision names a candidate the spell does not carry")
        return self


class RoomMessage(_Strict):
    room_id: Id


class UserMessage(_Strict):
    user_id: UserId


def parse(model: type[_Strict], payload: Any, what: str) -> Any:
    """`payload` as `model`, or MalformedMessage naming the fields that do not fit."""
    try:
        return model.model_validate(payload)
    except ValidationError as e:
        raise MalformedMessage(what, e) from None


def spell_json(payload: Any, what: str = "spell") -> dict[str, Any]:
    """A spell message, checked, as the plain dict `rows.Spell.from_json` builds from."""
    checked: SpellMessage = parse(SpellMessage, payload, what)
    return checked.model_dump()


def room_id(payload: Any, what: str = "room") -> str:
    return str(parse(RoomMessage, {"room_id": payload}, what).room_id)


def user_id(payload: Any, what: str = "user") -> int:
    return int(parse(UserMessage, {"user_id": payload}, what).user_id)


def spell_key(payload: Any, what: str = "spell key") -> str:
    """'persona/room/last line' (`rows.Spell.key`)."""
    checked = str(parse(RoomMessage, {"room_id": payload}, what).room_id)
    if checked.count("/") < 2 or not checked.rsplit("/", 1)[1].isdigit():
        raise MalformedMessage(what, "not persona/room/last line")
    return checked
