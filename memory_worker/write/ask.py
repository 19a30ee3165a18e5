"""Ask a model for JSON, re-asking once when the answer is malformed (docs/design.md §10.6).

A second malformed answer propagates as `MalformedAnswer`; the task shell parks the spell.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from string import Template
from typing import Any, ClassVar

from pydantic import BaseModel, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from memory_worker.core.constants import MALFORMED_REASKS
from memory_worker.core.errors import MalformedAnswer
from memory_worker.core.model_interfaces import ChatModel, ChatResult, T

HERE = Path(__file__).resolve().parent
ALL_ITEMS_INVALID = "all_items_invalid"  # pydantic error type: its message names counts only
REASK_NOTE = (
    "\n\nYour previous answer could not be used ({error}). "
    "Answer again with JSON that matches the schema exactly."
)


def templates(call: str) -> tuple[Template, Template]:
    """(system, prompt) of model call `call`: `<call>_system.txt` and `<call>_prompt.txt` beside
    this module (`core.verdict` hashes the same files: a verdict holds for these words only)."""
    system, prompt = ((HERE / f"{call}_{part}.txt").read_text() for part in ("system", "prompt"))
    return Template(system), Template(prompt)


def ask_json(
    model: ChatModel, system: str, prompt: str, schema: type[T], purpose: str
) -> ChatResult[T]:
    last_error: MalformedAnswer | None = None
    for attempt in range(MALFORMED_REASKS + 1):
        text = prompt if attempt == 0 else prompt + REASK_NOTE.format(error=str(last_error)[:300])
        try:
            return replace(
                model.chat_json(system, text, schema, purpose=purpose), calls=attempt + 1
            )
        except MalformedAnswer as e:
            last_error = e
    assert last_error is not None
    raise last_error


def keep_valid_items(data: Any, key: str, item: type[BaseModel]) -> tuple[Any, int]:
    """`data` with `data[key]` cut to the items that pass `item`'s schema, and how many did not.

    One ill-typed item of a model's answer must not lose its siblings: each is checked on its
    own. But an answer none of whose items passes did not answer at all: taken as "nothing",
    it would let the cursor pass lines nobody read (docs/design.md §10.8). It is refused as a whole
    (`ALL_ITEMS_INVALID`), so the caller re-asks, then retries, then parks — as for any
    malformed answer. An empty list is the model saying "nothing" and stays valid. Anything
    that is not a dict holding a list under `key` is returned as it is, for the whole
    answer's schema to refuse.
    """
    if not (isinstance(data, dict) and isinstance(data.get(key), list)):
        return data, 0
    good, bad = [], 0
    for raw in data[key]:
        try:
            good.append(item.model_validate(raw))
        except ValidationError:
            bad += 1
    if bad and not good:
        raise PydanticCustomError(
            ALL_ITEMS_INVALID,
            "all {count} item(s) of {key} failed their schema",
            {"count": bad, "key": key},
        )
    return {**data, key: good}, bad


class ItemsAnswer(BaseModel):
    """A model's answer holding one list (`ITEMS`) whose items (`ITEM`) are validated one by
    one (`keep_valid_items`): an ill-typed one is dropped and counted in `ill_formed`, its
    siblings go on; only an answer that is not this JSON at all is re-asked."""

    ITEMS: ClassVar[str]
    ITEM: ClassVar[type[BaseModel]]
    _ill_formed: int = PrivateAttr(0)

    @model_validator(mode="wrap")
    @classmethod
    def _each_item_on_its_own(cls, data: Any, handler: Any) -> Any:
        data, bad = keep_valid_items(data, cls.ITEMS, cls.ITEM)
        answer = handler(data)
        answer._ill_formed = bad
        return answer

    @property
    def ill_formed(self) -> int:
        return self._ill_formed
