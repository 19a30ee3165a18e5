"""The live provider: Gemini through the `google-genai` SDK (the Gemini Developer API).

Three things this module exists to get right (DESIGN.md "Traps we know of"):

* The SDK never retries here. Celery does, with backoff and jitter, honouring the server's
  hint; an SDK retrying underneath would multiply attempts and ignore `retryDelay` anyway.
* Every failure leaves as one of our three errors, so the write path decides what to do by
  type: 429/5xx/timeouts/dropped connections → `TransientModelError` (with `retry_after`
  from the error's `google.rpc.RetryInfo`, else the `Retry-After` header); other 4xx and a
  missing key → `PermanentModelError`; an answer that does not fit the schema →
  `MalformedAnswer` (the SDK only sets `parsed` to None, silently).
* Embeddings at 768 dims come back *not* normalised; we L2-normalise every vector.

This is the only module that imports `google.genai`; `memory_worker.models` imports it lazily,
only when the provider is 'gemini'.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import re
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
from google import genai
from google.genai import _transformers as genai_transformers
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import ValidationError

from memory_worker.constants import EMBEDDING_DIMS
from memory_worker.models.base import (
    ChatResult,
    MalformedAnswer,
    ModelError,
    PermanentModelError,
    PromptTooLarge,
    T,
    TransientModelError,
    Usage,
)
from memory_worker.settings import Settings

# The Gemini API rejects a batchEmbedContents call with more than this many texts.
EMBED_BATCH_MAX = 100
# The embedding task our vectors serve: candidate ↔ existing memory, both sides alike.
EMBED_TASK_TYPE = "SEMANTIC_SIMILARITY"
# Statuses worth retrying: rate limited, request timeout, server side.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Gemini's 400 for an over-long prompt: "The input token count (N) exceeds the maximum number
# of tokens allowed (M)." A 413 says the same at the HTTP layer.
_TOO_LARGE = re.compile(r"exceeds the maximum number of tokens|too large|too long", re.I)
# How much of a bad answer goes into an error message (the whole thing rides on `.raw`).
_SHOWN_CHARS = 300

_RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)s\s*$")


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(transient, other) transport exception types of whichever httpx flavours are installed.

    google-genai 3.6 talks through httpx2 (or httpx) and lets its exceptions through untouched:
    a timeout arrives as `httpx2.ReadTimeout`/`ConnectTimeout`, a refused connection as
    `httpx2.ConnectError` (found against memory_worker/models/gemini_stub.py).
    """
    transient: list[type[BaseException]] = []
    other: list[type[BaseException]] = []
    for name in ("httpx2", "httpx"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        for cls_name in ("TimeoutException", "NetworkError", "RemoteProtocolError", "ProxyError"):
            cls = getattr(mod, cls_name, None)
            if isinstance(cls, type):
                transient.append(cls)
        base = getattr(mod, "HTTPError", None)
        if isinstance(base, type):
            other.append(base)
    return tuple(transient), tuple(other)


_TRANSIENT_TRANSPORT, _OTHER_TRANSPORT = _transport_errors()


def make_client(settings: Settings) -> genai.Client:
    """A google-genai client for the Gemini Developer API, with the SDK's retries off.

    Raises PermanentModelError when no API key is configured: no retry can fix that.
    """
    key = (settings.gemini_api_key or "").strip()
    if not key:
        raise PermanentModelError(
            "the gemini provider needs an API key: set GEMINI_API_KEY "
            "(or MW_PROVIDER=replay to run offline from a cassette)"
        )
    http_options = types.HttpOptions(
        base_url=settings.gemini_base_url or None,  # None keeps the SDK's default endpoint
        timeout=settings.model_timeout_ms,  # milliseconds, as the SDK counts them
        retry_options=types.HttpRetryOptions(attempts=1),  # one attempt: Celery retries
    )
    # vertexai=False explicitly, so a stray GOOGLE_GENAI_USE_VERTEXAI cannot switch APIs.
    return genai.Client(vertexai=False, api_key=key, http_options=http_options)


# --- error mapping --------------------------------------------------------------------------


def parse_duration(value: object) -> float | None:
    """A protobuf Duration as JSON ("12s", "1.5s", or {"seconds": 12, "nanos": 5e8}) in seconds."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        return float(m.group(1)) if m else None
    if isinstance(value, dict):
        try:
            return float(value.get("seconds", 0) or 0) + float(value.get("nanos", 0) or 0) / 1e9
        except (TypeError, ValueError):
            return None
    return None


def _retry_info_delay(details: Any) -> float | None:
    """`retryDelay` from a `google.rpc.RetryInfo` anywhere in an error body's details."""
    if isinstance(details, list):
        for item in details:
            found = _retry_info_delay(item)
            if found is not None:
                return found
        return None
    if not isinstance(details, dict):
        return None
    if details.get("@type") == _RETRY_INFO_TYPE and "retryDelay" in details:
        return parse_duration(details["retryDelay"])
    for key in ("error", "details"):
        if key in details:
            found = _retry_info_delay(details[key])
            if found is not None:
                return found
    return None


def _retry_after_header(response: Any) -> float | None:
    """The HTTP `Retry-After` header (seconds or an HTTP date) of the failed response, if any."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after")
    except Exception:  # a response type we do not know: no hint rather than a crash
        return None
    if not value:
        return None
    value = str(value).strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after(err: genai_errors.APIError) -> float | None:
    """The server's hint: RetryInfo's `retryDelay` first (Gemini's own), else `Retry-After`."""
    hint = _retry_info_delay(err.details)
    if hint is None:
        hint = _retry_after_header(err.response)
    return hint


def _api_error(err: genai_errors.APIError, what: str) -> ModelError:
    code = int(err.code) if isinstance(err.code, int) else 0
    said = f"{what}: HTTP {code} {err.status or ''}: {err.message or err.details}".strip()
    if code in TRANSIENT_STATUSES:
        return TransientModelError(said, retry_after=retry_after(err), status=code)
    if code == 413 or (code == 400 and _TOO_LARGE.search(str(err.message or ""))):
        return PromptTooLarge(said)
    if code in (401, 403) or "API key" in str(err.message or ""):
        said += " (check GEMINI_API_KEY)"
    return PermanentModelError(said)


@contextlib.contextmanager
def model_errors(what: str) -> Iterator[None]:
    """Translate whatever the SDK raises inside the block into our three error types."""
    try:
        yield
    except genai_errors.APIError as err:
        raise _api_error(err, what) from err
    except genai_errors.UnknownApiResponseError as err:  # a 200 whose body is not JSON: a proxy
        raise TransientModelError(f"{what}: unreadable response: {err}") from err
    except _TRANSIENT_TRANSPORT as err:
        raise TransientModelError(f"{what}: {type(err).__name__}: {err}") from err
    except _OTHER_TRANSPORT as err:  # e.g. an unsupported URL scheme: configuration, not luck
        raise PermanentModelError(f"{what}: {type(err).__name__}: {err}") from err


# --- the two providers ----------------------------------------------------------------------


def _usage(response: types.GenerateContentResponse) -> Usage:
    """Tokens in and out; thinking tokens are billed as output, so they count as output."""
    meta = response.usage_metadata
    if meta is None:
        return Usage(0, 0)
    out = (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
    return Usage(tokens_in=meta.prompt_token_count or 0, tokens_out=out)


def _finish_reasons(response: types.GenerateContentResponse) -> str:
    reasons = []
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason is not None:
        reasons.append(f"prompt blocked: {feedback.block_reason}")
    for cand in response.candidates or []:
        if cand.finish_reason is not None:
            reasons.append(f"finish reason {cand.finish_reason}")
    return "; ".join(reasons) or "no candidates"


@cache
def response_schema(schema: type) -> types.Schema:
    """The API's schema for a pydantic answer class, built once per process.

    Handing the SDK the class makes it regenerate the JSON schema on every request (~0.5 ms
    of CPU each, issue 10); handing it this Schema skips that. The SDK then leaves `parsed`
    as plain JSON and `chat_json` validates the text itself — one validation either way.
    `_transformers.t_schema` is the SDK's own conversion (pinned to google-genai 3.6.x).
    """
    return genai_transformers.t_schema(None, schema)  # type: ignore[return-value]  # typed Optional; a class always converts


class GeminiChat:
    """`ChatModel` over `models.generate_content` with a JSON response schema, temperature 0."""

    def __init__(self, settings: Settings, client: genai.Client | None = None):
        self.settings = settings
        self.model = settings.chat_model
        self._client = client if client is not None else make_client(settings)

    def chat_json(
        self, system: str, prompt: str, schema: type[T], *, purpose: str
    ) -> ChatResult[T]:
        what = f"gemini {self.model} ({purpose})"
        config = types.GenerateContentConfig(
            system_instruction=system,
            response_mime_type="application/json",
            response_schema=response_schema(schema),
            temperature=0,
        )
        with model_errors(what):
            response = self._client.models.generate_content(
                model=self.model, contents=prompt, config=config
            )
        raw = response.text
        parsed = response.parsed
        if not isinstance(parsed, schema):
            parsed = self._validate_or_raise(raw, schema, response, what)
        return ChatResult(parsed=parsed, usage=_usage(response), raw=raw or "")

    @staticmethod
    def _validate_or_raise(
        raw: str | None, schema: type[T], response: types.GenerateContentResponse, what: str
    ) -> T:
        """Validate the text ourselves: the SDK's `parsed` is None with no reason given.

        If our validation passes where the SDK's did not, the answer *does* fit the schema and
        is used; otherwise the pydantic error (which field, why) goes into MalformedAnswer.
        """
        if raw is None:
            raise MalformedAnswer(f"{what}: the answer had no text ({_finish_reasons(response)})")
        try:
            return schema.model_validate_json(raw)
        except ValidationError as err:
            shown = raw if len(raw) <= _SHOWN_CHARS else raw[:_SHOWN_CHARS] + "…"
            finish = _finish_reasons(response)
            raise MalformedAnswer(
                f"{what}: the answer does not fit {schema.__name__} ({finish}): "
                f"{err.error_count()} error(s): {_first_errors(err)}; answer: {shown}",
                raw=raw,
            ) from err


def _first_errors(err: ValidationError, limit: int = 3) -> str:
    parts = []
    for e in err.errors()[:limit]:
        loc = ".".join(str(x) for x in e.get("loc", ())) or "<root>"
        parts.append(f"{loc}: {e.get('msg')}")
    return "; ".join(parts)


class GeminiEmbedder:
    """`Embedder` over `models.embed_content`: one batched call, unit vectors of `dims` floats."""

    def __init__(
        self, settings: Settings, client: genai.Client | None = None, dims: int = EMBEDDING_DIMS
    ):
        self.settings = settings
        self.model = settings.embed_model
        self.dims = dims
        self.name = f"gemini/{self.model}"  # what the store records (storage.embedder)
        self._client = client if client is not None else make_client(settings)

    def embed(self, texts: list[str], *, purpose: str) -> list[list[float]]:
        """Embed all texts in one request (chunks of 100 only past the API's batch limit)."""
        if not texts:
            return []
        out: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH_MAX):
            out.extend(self._embed_batch(list(texts[start : start + EMBED_BATCH_MAX]), purpose))
        return out

    def _embed_batch(self, texts: list[str], purpose: str) -> list[list[float]]:
        what = f"gemini {self.model} ({purpose})"
        config = types.EmbedContentConfig(
            output_dimensionality=self.dims, task_type=EMBED_TASK_TYPE
        )
        contents: Any = texts  # list[str] is a valid ContentListUnion; list invariance says no
        with model_errors(what):
            response = self._client.models.embed_content(
                model=self.model, contents=contents, config=config
            )
        embeddings = response.embeddings or []
        if len(embeddings) != len(texts):
            raise MalformedAnswer(
                f"{what}: asked for {len(texts)} embeddings, got {len(embeddings)}",
                raw=f"{len(embeddings)} embeddings",
            )
        vectors: list[list[float]] = []
        for i, emb in enumerate(embeddings):
            values = np.asarray(emb.values or [], dtype=np.float64)
            norm = float(np.linalg.norm(values)) if values.size else 0.0
            if values.size != self.dims or not math.isfinite(norm) or norm == 0.0:
                raise MalformedAnswer(
                    f"{what}: embedding {i} has {values.size} values (norm {norm:.3g}); "
                    f"expected a non-zero vector of {self.dims}",
                    raw=f"embedding {i}: {values.size} values",
                )
            vectors.append([float(x) for x in values / norm])
        return vectors
