"""The writes the page and the API share: one function per control, over `controls`.

Each takes the signed-in user and its typed input, calls `memory_worker.controls` (which checks
the row or notice is the user's), and returns a small result. The HTML routes and the JSON
routes are generated from the same `ACTIONS` table, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from memory_worker import controls


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoInput(_Strict):
    pass


class ClearInput(_Strict):
    persona: StrictStr | None = None  # None: every persona


class NoteInput(_Strict):
    note: StrictStr = ""  # the length is checked by controls (NoteTooLong), not here


class SwitchInput(_Strict):
    on: StrictBool


class RoomInput(_Strict):
    persona: StrictStr = Field(min_length=1)
    incognito: StrictBool = False


@dataclass(frozen=True)
class Action:
    """One write: its path (mirrored under /api/), its input, and what it does."""

    path: str
    input: type[_Strict]
    run: Callable[[int, dict[str, Any], Any], dict[str, Any]]
    done: str  # the page's message afterwards (a code, looked up in the template)
    anchor: str  # where the page scrolls back to


def _undo(user_id: int, path: dict[str, Any], _: NoInput) -> dict[str, Any]:
    return {"deleted": controls.undo_notice(user_id, path["notice_id"])}


def _delete(user_id: int, path: dict[str, Any], _: NoInput) -> dict[str, Any]:
    controls.delete_row(user_id, path["row_id"])
    return {"deleted": 1}


def _clear(user_id: int, _: dict[str, Any], body: ClearInput) -> dict[str, Any]:
    return {"deleted": controls.clear_all(user_id, persona=body.persona)}


def _note(user_id: int, _: dict[str, Any], body: NoteInput) -> dict[str, Any]:
    controls.set_note(user_id, body.note)
    return {"note": controls.clean_note(body.note)}


def _memory_on(user_id: int, _: dict[str, Any], body: SwitchInput) -> dict[str, Any]:
    controls.set_memory_on(user_id, body.on)
    return {"memory_on": body.on}


def _forget_me(user_id: int, path: dict[str, Any], body: SwitchInput) -> dict[str, Any]:
    (controls.mute if body.on else controls.unmute)(user_id, path["persona"])
    return {"persona": path["persona"], "forget_me": body.on}


def _follow(user_id: int, path: dict[str, Any], body: SwitchInput) -> dict[str, Any]:
    controls.set_follows(user_id, path["persona"], body.on)
    return {  # the switch as set, and whether that now lets anything follow (what /api/page says)
        "persona": path["persona"],
        "follow_switch": body.on,
        "follows_into_groups": controls.follows_into_groups(user_id, path["persona"]),
    }


def _start_room(user_id: int, _: dict[str, Any], body: RoomInput) -> dict[str, Any]:
    room_id = controls.start_room(user_id, body.persona, incognito=body.incognito)
    return {"room_id": room_id, "incognito": body.incognito}


ACTIONS = [
    Action("/notices/{notice_id:int}/undo", NoInput, _undo, "undone", "rail"),
    Action("/memories/{row_id:int}/delete", NoInput, _delete, "deleted", "memories"),
    Action("/clear", ClearInput, _clear, "cleared", "memories"),
    Action("/note", NoteInput, _note, "note", "note"),
    Action("/switches/memory_on", SwitchInput, _memory_on, "switched", "switches"),
    Action("/personas/{persona:str}/forget_me", SwitchInput, _forget_me, "switched", "memories"),
    Action("/personas/{persona:str}/follow", SwitchInput, _follow, "switched", "memories"),
    Action("/rooms", RoomInput, _start_room, "room", "rooms"),
]


def form_input(action: Action, form: dict[str, str]) -> dict[str, Any]:
    """An HTML form's strings as the action's typed input: the same model validates both.

    A boolean arrives as a button's value ("1"/"0") or a checkbox present or absent; an empty
    text field means "not given" where the field has no default text (clear all: everyone).
    """
    out: dict[str, Any] = {}
    for name, field in action.input.model_fields.items():
        value = form.get(name)
        if field.annotation is bool:
            out[name] = value in ("1", "on", "true")
        elif value is not None:
            out[name] = value if (value or field.default is not None) else None
    return out
