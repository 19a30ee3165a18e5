"""The two small interfaces every model provider implements, and the errors they raise.

The write path sees only these: `ChatModel.chat_json` (a prompt in, a pydantic-validated JSON
answer out) and `Embedder.embed` (a batch of texts in, unit vectors out). Errors say what the
caller should do: retry (`TransientModelError`), re-ask then park (`MalformedAnswer`), or park
at once (`PermanentModelError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)


class ModelError(Exception):
    """Anything a model provider could not do."""


class TransientModelError(ModelError):
    """429, 5xx, a timeout: worth retrying. `retry_after` is the server's hint in seconds."""

    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class MalformedAnswer(ModelError):
    """The answer did not validate against the schema (google-genai's `parsed` was None)."""

    def __init__(self, message: str, raw: str | None = None):
        super().__init__(message)
        self.raw = raw


class PermanentModelError(ModelError):
    """A 4xx other than 429, a missing key, a replay miss: retrying will not help."""


class PromptTooLarge(PermanentModelError):
    """The model refused the prompt as too long for its context: ask again with less."""


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
