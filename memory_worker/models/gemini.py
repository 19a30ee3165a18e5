"""The live provider: Gemini through the `google-genai` SDK (the Gemini Developer API).

Three things this module exists to get right (docs/design.md §14):

* The SDK never retries here. Celery does, with backoff and jitter, honouring the server's
  hint; an SDK retrying underneath would multiply attempts and ignore `retryDelay` anyway.
* Every failure leaves as one of our three errors, so the write path decides what to do by
  type: 429/5xx/timeouts/dropped connections → `TransientModelError` (with `retry_after`
  from the error's `google.rpc.RetryInfo`, else the `Retry-After` header); other 4xx and a
  missing key → `PermanentModelError`; an answer that does not fit the schema →
  `MalformedAnswer` (validated here: the SDK would only set `parsed` to None, silently).
* Embeddings at 768 dims come back *not* normalised; we L2-normalise every vector.

Why the request bodies are written here (cheaper spells): the SDK's
`generate_content` converts the pydantic `GenerateContentConfig` (response schema, system
instruction) into the REST body on every call (~5% of the worker's CPU) and parses every answer
into pydantic models (~1.5%), and `embed_content` does the same for embeddings. So `chat_json` and
`embed` build the Gemini Developer API's JSON bodies as plain dicts (the per-schema part once
per process, `_generation_config`) and read the answer's JSON dict themselves, exactly as the SDK
would read it (text of the first candidate without thought parts, usage, finish reasons,
continuation hops). They still send through the same client's transport,
`Client._api_client.request` — so the URL, the key header, the timeout, retries off and every
error raised are the SDK's own — but that is a private seam, hence the `google-genai>=3.6,<3.7`
pin. tests/models/test_gemini_requests.py proves the bodies equal what the SDK itself would send,
and the answers read equal what the SDK's response objects say; bump the pin only with it passing.

This is the only module that imports `google.genai`; `memory_worker.models` imports it lazily,
only when the provider is 'gemini'.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import json
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

from memory_worker.core.constants import EMBEDDING_DIMS
from memory_worker.core.errors import (
    MalformedAnswer,
    ModelError,
    PermanentModelError,
    PromptTooLarge,
    TransientModelError,
)
from memory_worker.core.model_interfaces import ChatResult, T, Usage, describe_invalid
from memory_worker.core.settings import Settings

# The Gemini API rejects a batchEmbedContents call with more than this many texts.
EMBED_BATCH_MAX = 100
# The embedding task our vectors serve: candidate ↔ existing memory, both sides alike.
EMBED_TASK_TYPE = "SEMANTIC_SIMILARITY"
# Statuses worth retrying: rate limited, request timeout, server side.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Gemini's 400 for an over-long prompt: "The input token count (N) exceeds the maximum number
# of tokens allowed (M)." A 413 says the same at the HTTP layer.
_TOO_LARGE = re.compile(r"exceeds the maximum number of tokens|too large|too long", re.I)

_RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)s\s*$")


def _transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(transient, other) transport exception types of whichever httpx flavours are installed.

    google-genai 3.6 talks through httpx2 (or httpx) and lets its exceptions through untouched:
    a timeout arrives as `httpx2.ReadTimeout`/`ConnectTimeout`, a refused connection as
    `httpx2.ConnectError` (found against memory_worker/testing/gemini_stub.py).
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


# --- the two providers ---------------------------------------------------------------------
#
# The bodies are the Gemini Developer API's (make_client pins vertexai=False), written as the
# SDK's `_GenerateContentParameters_to_mldev` / `_EmbedContentParametersPrivate_to_mldev` write
# them; the answers are read as `GenerateContentResponse` / `EmbedContentResponse` read them.

_CONTINUATION = "CONTINUATION"


@cache
def response_schema(schema: type) -> types.Schema:
    """The API's schema for a pydantic answer class, built once per process.

    `_transformers.t_schema` is the SDK's own conversion (pinned to google-genai 3.6.x); building
    it costs ~0.5 ms of CPU, so never per request.
    """
    converted = genai_transformers.t_schema(None, schema)
    if converted is None:  # typed Optional by the SDK; a class always converts
        raise TypeError(f"the SDK could not convert {schema.__name__} to a schema")
    return converted


@cache
def _generation_config(schema: type) -> dict[str, Any]:
    """`generationConfig` for one answer class: JSON out, this schema, temperature 0.

    Built once per process and shared by every request for `schema`, so nothing may change it:
    the transport only serialises it (it would merge `HttpOptions.extra_body` into it, which
    make_client never sets). `model_dump(exclude_none=True)` is what the SDK's `convert_to_dict`
    does to the Schema; mode="json" turns its enums into the strings they serialise as.
    """
    return {
        "temperature": 0.0,
        "responseMimeType": "application/json",
        "responseSchema": response_schema(schema).model_dump(mode="json", exclude_none=True),
    }


def _user_content(text: str) -> dict[str, Any]:
    """A text as the SDK's `t_content` + `_Content_to_mldev` send it."""
    return {"parts": [{"text": text}], "role": "user"}


def generate_content_body(system: str, prompt: str, schema: type) -> dict[str, Any]:
    """The generateContent body `chat_json` sends (a continuation hop adds its token)."""
    return {
        "contents": [_user_content(prompt)],
        "systemInstruction": _user_content(system),
        "generationConfig": _generation_config(schema),
    }


def embed_body(model: str, texts: list[str], dims: int) -> dict[str, Any]:
    """The batchEmbedContents body: one request per text; `model` as `t_model` spells it.

    One difference from the SDK, on purpose: for a multimodal embedding model (a 'gemini-…' id
    other than gemini-embedding-001/-exp) the SDK's `embed_content` folds a list of strings into
    ONE content of many parts, i.e. one embedding for the whole list; each text is its own
    request here, as for every other model.
    """
    return {
        "requests": [
            {
                "content": _user_content(text),
                "taskType": EMBED_TASK_TYPE,
                "outputDimensionality": dims,
                "model": model,
            }
            for text in texts
        ]
    }


def _model_path(client: genai.Client, model: str) -> str:
    """'models/<id>' as the SDK's `t_model` spells (and checks) a model name."""
    return genai_transformers.t_model(client._api_client, model)


def _post(client: genai.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One POST through the SDK's own transport, its answer as a JSON dict (as the SDK reads it).

    `request` raises `genai_errors.APIError` for a non-200 and lets transport errors through,
    exactly as inside `generate_content`; call it within `model_errors`.
    """
    response = client._api_client.request("post", path, body, None)
    try:
        answer = json.loads(response.body) if response.body else {}
    except ValueError as err:  # a 200 whose body is not JSON: a proxy in the way, not the model
        raise TransientModelError(f"{path}: the answer is not JSON ({err})") from err
    if not isinstance(answer, dict):
        raise TransientModelError(f"{path}: the answer is JSON but not an object")
    return answer


def _first_candidate(answer: dict[str, Any]) -> dict[str, Any] | None:
    candidates = answer.get("candidates")
    return candidates[0] if candidates else None


def _continuation_token(answer: dict[str, Any]) -> str | None:
    """The token to send back when the SDK would follow this answer with another hop.

    The SDK follows (automatic continuation, on by default) when the first candidate carries a
    `continuationToken` and its finish reason is absent or CONTINUATION. It reads the token as
    bytes (base64, either alphabet) and sends it back URL-safe and padded; so does this.
    """
    first = _first_candidate(answer)
    if not first or not first.get("continuationToken"):
        return None
    if first.get("finishReason") not in (None, _CONTINUATION):
        return None
    token = str(first["continuationToken"]).replace("+", "-").replace("/", "_")
    raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
    return base64.urlsafe_b64encode(raw).decode("ascii") if raw else None


def _text(hops: list[dict[str, Any]]) -> str | None:
    """The SDK's `response.text`: the first candidate's text parts, thoughts left out, joined
    across continuation hops; None when there is no text part at all ('' is a text)."""
    pieces: list[str] = []
    for answer in hops:
        first = _first_candidate(answer)
        for part in ((first or {}).get("content") or {}).get("parts") or []:
            text = part.get("text")
            if isinstance(text, str) and part.get("thought") is not True:
                pieces.append(text)
    return "".join(pieces) if pieces else None


def _usage(hops: list[dict[str, Any]]) -> Usage:
    """Tokens in and out, summed over hops; thinking tokens are billed as output, so count there."""
    tokens_in = tokens_out = 0
    for answer in hops:
        meta = answer.get("usageMetadata") or {}
        tokens_in += int(meta.get("promptTokenCount") or 0)
        tokens_out += int(meta.get("candidatesTokenCount") or 0)
        tokens_out += int(meta.get("thoughtsTokenCount") or 0)
    return Usage(tokens_in=tokens_in, tokens_out=tokens_out)


def _finish_reasons(hops: list[dict[str, Any]]) -> str:
    """Why an answer has no usable text, worded as the SDK's enums print ('FinishReason.STOP').

    Across hops, as the SDK merges them: the last block reason given; per candidate, the last
    hop's finish reason (a hop without candidates clears them all).
    """
    blocked: Any = None
    finish: list[Any] = []
    for answer in hops:
        feedback = answer.get("promptFeedback") or {}
        if feedback.get("blockReason") is not None:
            blocked = feedback["blockReason"]
        candidates = answer.get("candidates")
        if candidates:
            finish[: len(candidates)] = [(c or {}).get("finishReason") for c in candidates]
        else:
            finish = [None] * len(finish)
    reasons = [f"prompt blocked: BlockedReason.{blocked}"] if blocked is not None else []
    reasons.extend(f"finish reason FinishReason.{r}" for r in finish if r is not None)
    return "; ".join(reasons) or "no candidates"


class GeminiChat:
    """`ChatModel` over generateContent with a JSON response schema, temperature 0."""

    def __init__(self, settings: Settings, client: genai.Client | None = None):
        self.settings = settings
        self.model = settings.chat_model
        self._client = client if client is not None else make_client(settings)

    def chat_json(
        self, system: str, prompt: str, schema: type[T], *, purpose: str
    ) -> ChatResult[T]:
        what = f"gemini {self.model} ({purpose})"
        body = generate_content_body(system, prompt, schema)
        hops: list[dict[str, Any]] = []
        with model_errors(what):
            path = f"{_model_path(self._client, self.model)}:generateContent"
            while True:  # one hop, unless the model asks to be continued (as the SDK follows)
                hops.append(_post(self._client, path, body))
                token = _continuation_token(hops[-1])
                if token is None:
                    break
                body = {**body, "continuationToken": token}
        raw = _text(hops)
        parsed = self._validate_or_raise(raw, schema, hops, what)
        return ChatResult(parsed=parsed, usage=_usage(hops), raw=raw or "")

    @staticmethod
    def _validate_or_raise(
        raw: str | None, schema: type[T], hops: list[dict[str, Any]], what: str
    ) -> T:
        """Validate the text ourselves; the pydantic error (which field, why) goes into
        MalformedAnswer (`describe_invalid`: never the answer's text), and an answer without text
        says why the model gave none."""
        if raw is None:
            raise MalformedAnswer(f"{what}: the answer had no text ({_finish_reasons(hops)})")
        try:
            return schema.model_validate_json(raw)
        except ValidationError as err:
            raise MalformedAnswer(
                f"{what}: the answer does not fit {schema.__name__} ({_finish_reasons(hops)}): "
                f"{describe_invalid(err, schema)}",
                raw=raw,
            ) from err


class GeminiEmbedder:
    """`Embedder` over batchEmbedContents: one batched call, unit vectors of `dims` floats."""

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
        with model_errors(what):
            model = _model_path(self._client, self.model)
            body = embed_body(model, texts, self.dims)
            answer = _post(self._client, f"{model}:batchEmbedContents", body)
        embeddings = answer.get("embeddings") or []
        if len(embeddings) != len(texts):
            raise MalformedAnswer(
                f"{what}: asked for {len(texts)} embeddings, got {len(embeddings)}",
                raw=f"{len(embeddings)} embeddings",
            )
        vectors: list[list[float]] = []
        for i, emb in enumerate(embeddings):
            values = np.asarray((emb or {}).get("values") or [], dtype=np.float64)
            norm = float(np.linalg.norm(values)) if values.size else 0.0
            if values.size != self.dims or not math.isfinite(norm) or norm == 0.0:
                raise MalformedAnswer(
                    f"{what}: embedding {i} has {values.size} values (norm {norm:.3g}); "
                    f"expected a non-zero vector of {self.dims}",
                    raw=f"embedding {i}: {values.size} values",
                )
            vectors.append([float(x) for x in values / norm])
        return vectors
