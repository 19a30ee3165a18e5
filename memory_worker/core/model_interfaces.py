"""The two small interfaces every model provider implements; the errors they raise live in
`core.errors`.

The write path sees only these: `ChatModel.chat_json` (a prompt in, a pydantic-validated JSON
answer out) and `Embedder.embed` (a batch of texts in, unit vectors out). Errors say what the
caller should do: retry (`TransientModelError`), re-ask then park (`MalformedAnswer`), or park
at once (`PermanentModelError`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)


# pydantic error types whose message is built from the schema alone, never from the input;
# any other type is named by its code (a `union_tag_invalid` message quotes the input's tag).
_SCHEMA_ONLY_MESSAGES = frozenset(
    {
        "missing", "extra_forbidden", "json_invalid", "json_type", "model_type",
        "model_attributes_type", "dict_type", "list_type", "string_type", "int_type",
        "int_parsing", "int_from_float", "float_type", "float_parsing", "bool_type",
        "bool_parsing", "literal_error", "string_too_long", "string_too_short", "too_long",
        "too_short", "greater_than", "greater_than_equal", "less_than", "less_than_equal",
        "all_items_invalid",  # memory_worker.write.ask: a count and the list's field name
    }
)  # fmt: skip


def describe_invalid(err: ValidationError, schema: type[BaseModel], limit: int = 3) -> str:
    """How many errors, and where and why for the first few — where as the schema's own field
    names and item numbers (a key the model made up shows as `<key>`), why as pydantic's
    message when that comes from the schema alone, else its error type. Nothing of the
    answer's text: see MalformedAnswer."""
    names = _field_names(schema)
    parts = []
    for e in err.errors()[:limit]:
        loc = ".".join(
            str(x) if isinstance(x, int) or x in names else "<key>" for x in e.get("loc", ())
        )
        why = e["msg"] if e["type"] in _SCHEMA_ONLY_MESSAGES else e["type"]
        parts.append(f"{loc or '<root>'}: {why}")
    return f"{err.error_count()} error(s): " + "; ".join(parts)


@functools.cache
def _field_names(schema: type[BaseModel]) -> frozenset[str]:
    """Every property name anywhere in the schema (nested models included)."""
    names: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                names.update(props)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema.model_json_schema())
    return frozenset(names)


@dataclass(frozen=True)
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    estimated: bool = False  # True when counted as chars/4 (the replay provider)


@dataclass(frozen=True)
class ChatResult(Generic[T]):
    parsed: T
    usage: Usage
    raw: str
    calls: int = 1  # model calls it took, a re-ask after a malformed answer included


class ChatModel(Protocol):
    def chat_json(
        self, system: str, prompt: str, schema: type[T], *, purpose: str
    ) -> ChatResult[T]:
        """Ask for JSON matching `schema`; raise MalformedAnswer if it does not validate.

        `purpose` ('extract', 'route') names the call in logs, cassettes and stub servers.
        """
        ...


class Embedder(Protocol):
    name: str  # the model, as the store records it: vectors of two names never mix
    dims: int

    def embed(self, texts: list[str], *, purpose: str) -> list[list[float]]:
        """One batched call: a unit-length vector of `dims` floats per text, in order."""
        ...
