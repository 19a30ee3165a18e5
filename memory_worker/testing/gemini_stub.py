"""A local stand-in for the Gemini Developer API, on loopback, for tests that use the real SDK.

Nothing about google-genai is mocked: the SDK builds its real HTTP requests and parses real
responses, pointed here through `HttpOptions(base_url=stub.base_url)`. The stub serves what
google-genai 3.6 calls (checked by recording its requests; the SDK's default API version is
`v1`, `v1beta`/`v1alpha` are served alike):

* ``POST /{version}/models/{model}:generateContent``  — `models.generate_content`
* ``POST /{version}/models/{model}:batchEmbedContents`` — `models.embed_content` (a list or one)
* ``POST /{version}/models/{model}:embedContent``   — not used by the SDK today; served anyway

Faults are queued and consumed in order by the next matching requests (`kind` 'chat'/'embed'
or None for either): `fail_next(status, retry_delay=...)` answers with a Google-shaped error body,
`hang_next(seconds)` sleeps before answering (a client timeout), `malformed_next(text)` answers
200 with text that does not fit the schema. Every request is recorded, faulted or not.

Usage::

    with GeminiStub() as stub:
        stub.chat_responder = lambda body: {"name": "x"}
        settings = stub.settings(model_timeout_ms=300)

or the `gemini_stub` pytest fixture (tests/conftest.py). The tests use it for faults, the
write benchmark for a zero-latency model; nothing in the product imports it.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memory_worker.core.settings import Settings
from memory_worker.models.hashing import HashingEmbedder
from memory_worker.models.scripted import sensible_route

# The factor the default embed responder scales unit vectors by: Gemini's 768-dim vectors are
# not normalised, so neither are the stub's, and a test can prove the client normalises.
EMBED_SCALE = 3.0
TEST_API_KEY = "stub-test-key"

_PATH = re.compile(r"^/(?P<version>v1[a-z0-9]*)/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")
_KIND_BY_METHOD = {
    "generateContent": "chat",
    "batchEmbedContents": "embed",
    "embedContent": "embed",
}
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

ChatResponder = Callable[[dict[str, Any]], dict[str, Any] | list[Any] | str]
EmbedResponder = Callable[[list[str], int], list[list[float]]]


def token_estimate(text: str) -> int:
    """The stub's token count for a text (chars/4, rounded up): tests compute usage with it."""
    return math.ceil(len(text) / 4)


def _texts(content: Any) -> list[str]:
    if not isinstance(content, dict):
        return []
    return [p["text"] for p in content.get("parts", []) if isinstance(p, dict) and "text" in p]


def system_text(body: dict[str, Any]) -> str:
    """The system instruction of a generateContent body, its text parts joined."""
    return "".join(_texts(body.get("systemInstruction")))


def prompt_text(body: dict[str, Any]) -> str:
    """The user prompt of a generateContent body: the text of its user turns, joined."""
    turns = [c for c in body.get("contents", []) if c.get("role", "user") == "user"]
    return "\n".join("".join(_texts(c)) for c in turns)


def embed_texts(body: dict[str, Any]) -> list[str]:
    """The texts of a batchEmbedContents (or embedContent) body, in order."""
    if "requests" in body:
        return ["".join(_texts(r.get("content"))) for r in body["requests"]]
    return ["".join(_texts(body.get("content")))]


def default_chat_responder(body: dict[str, Any]) -> dict[str, Any]:
    """Answers `{}`: fine for a schema with no required fields; set `chat_responder` for more."""
    return {}


def gemini_responder(extract: object) -> Callable[[dict[str, Any]], object]:
    """A stub-server chat responder: `extract` (dict, or callable of the prompt) for call A,
    `sensible_route` for call B — told apart by their system instructions."""

    def respond(body: dict[str, Any]) -> object:
        prompt = prompt_text(body)
        if system_text(body).startswith("You are a smart memory manager"):
            return sensible_route(prompt)
        return extract(prompt) if callable(extract) else extract

    return respond


def default_embed_responder(texts: list[str], dims: int) -> list[list[float]]:
    """The hashing embedder's vectors, scaled by EMBED_SCALE so they are not unit length."""
    hashing = HashingEmbedder(dims)
    return [[float(x) * EMBED_SCALE for x in hashing.vector(t)] for t in texts]


def error_body(
    status: int, message: str | None = None, retry_delay: str | None = None
) -> dict[str, Any]:
    """An error body shaped like Google's: code, message, status and, for 429, its details."""
    details: list[dict[str, Any]] = []
    if status == 429:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/"
                        "generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                    }
                ],
            }
        )
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [{"description": "Learn more", "url": "https://ai.google.dev/"}],
            }
        )
    if retry_delay is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        )
    error: dict[str, Any] = {
        "code": status,
        "message": message or f"stub fault {status}",
        "status": _STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if details:
        error["details"] = details
    return {"error": error}


@dataclass(frozen=True)
class Fault:
    """One queued misbehaviour; `kind` None matches chat and embed requests alike."""

    kind: str | None = None
    status: int = 200
    retry_delay: str | None = None
    retry_after_header: str | None = None
    message: str | None = None
    hang_seconds: float = 0.0
    text: str | None = None  # a 200 chat answer with this text, verbatim

    def matches(self, kind: str) -> bool:
        return self.kind is None or self.kind == kind


@dataclass(frozen=True)
class RecordedRequest:
    kind: str  # 'chat' | 'embed' | 'other'
    path: str
    model: str
    body: dict[str, Any]
    headers: dict[str, str]
    texts: int = 0  # for embeds: how many texts the one request carried
    fault: Fault | None = None
    at: float = 0.0  # time.monotonic() when the request arrived (rate-limit tests)


@dataclass
class GeminiStub:
    """The stub server. Start with `start()` or `with`; point the SDK at `base_url`."""

    chat_responder: ChatResponder = default_chat_responder
    embed_responder: EmbedResponder = default_embed_responder
    require_api_key: bool = True
    # Like the real API's context window: a chat prompt longer than this many characters is
    # refused with Gemini's own 400 ("exceeds the maximum number of tokens"). None: no limit.
    max_prompt_chars: int | None = None
    # Called for a request no queued fault matched: a Fault to answer with, or None (the fault
    # benchmarks fail a share of calls at random this way).
    chaos: Callable[[str], Fault | None] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    _faults: deque[Fault] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> GeminiStub:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(
            target=server.serve_forever, name="gemini-stub", kwargs={"poll_interval": 0.05}
        )
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes any hanging handler
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> GeminiStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def settings(self, base: Settings | None = None, **changes: Any) -> Settings:
        """Settings for the gemini provider pointed at this stub (with a test key)."""
        s = (base or Settings()).with_(
            provider="gemini", gemini_api_key=TEST_API_KEY, gemini_base_url=self.base_url
        )
        return s.with_(**changes) if changes else s

    # --- faults -----------------------------------------------------------------------------

    def fail_next(
        self,
        status: int = 500,
        retry_delay: str | None = None,
        *,
        kind: str | None = None,
        message: str | None = None,
        retry_after: str | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` matching requests answer `status` with a Google-shaped error body.

        `retry_delay` ("2s") adds a `google.rpc.RetryInfo`; `retry_after` sets the HTTP header.
        """
        self._queue(
            Fault(
                kind=kind,
                status=status,
                retry_delay=retry_delay,
                retry_after_header=retry_after,
                message=message,
            ),
            times,
        )

    def hang_next(self, seconds: float, *, kind: str | None = None, times: int = 1) -> None:
        """The next matching requests wait `seconds` before answering (or until `stop()`)."""
        self._queue(Fault(kind=kind, hang_seconds=seconds), times)

    def malformed_next(self, text: str, *, kind: str = "chat", times: int = 1) -> None:
        """The next matching chat requests answer 200 with `text` as the model's text."""
        self._queue(Fault(kind=kind, text=text), times)

    def _queue(self, fault: Fault, times: int) -> None:
        with self._lock:
            self._faults.extend([fault] * times)

    def _take_fault(self, kind: str) -> Fault | None:
        with self._lock:
            for i, fault in enumerate(self._faults):
                if fault.matches(kind):
                    del self._faults[i]
                    return fault
        return self.chaos(kind) if self.chaos is not None else None

    @property
    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    # --- records ----------------------------------------------------------------------------

    def _record(self, rec: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(rec)

    def count(self, kind: str | None = None) -> int:
        """Requests received so far (of one kind: 'chat' or 'embed')."""
        with self._lock:
            return sum(1 for r in self.requests if kind is None or r.kind == kind)

    def of_kind(self, kind: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.kind == kind]

    def reset(self) -> None:
        """Forget recorded requests and pending faults; responders go back to the defaults."""
        with self._lock:
            self.requests.clear()
            self._faults.clear()
        self.chat_responder = default_chat_responder
        self.embed_responder = default_embed_responder
        self.max_prompt_chars = None

    # --- answering (called from handler threads) ----------------------------------------------

    def _answer(
        self, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        """(status, extra headers, JSON body) for one request."""
        m = _PATH.match(path.split("?", 1)[0])
        kind = _KIND_BY_METHOD.get(m.group("method"), "other") if m else "other"
        model = m.group("model") if m else ""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        texts = len(embed_texts(body)) if kind == "embed" else 0
        fault = self._take_fault(kind) if kind != "other" else None
        self._record(
            RecordedRequest(kind, path, model, body, headers, texts, fault, time.monotonic())
        )

        if kind == "other":
            return 404, {}, error_body(404, f"the stub does not serve {path}")
        if self.require_api_key and not headers.get("x-goog-api-key"):
            return 403, {}, error_body(403, "Method doesn't allow unregistered callers")
        if fault is not None and fault.hang_seconds:
            self._stopping.wait(fault.hang_seconds)
        if fault is not None and fault.status != 200:
            extra = {"Retry-After": fault.retry_after_header} if fault.retry_after_header else {}
            return fault.status, extra, error_body(fault.status, fault.message, fault.retry_delay)
        if kind == "chat" and self.max_prompt_chars is not None:
            size = len(prompt_text(body)) + len(system_text(body))
            if size > self.max_prompt_chars:
                said = (
                    f"The input token count ({token_estimate('x' * size)}) exceeds the maximum "
                    f"number of tokens allowed ({token_estimate('x' * self.max_prompt_chars)})."
                )
                return 400, {}, error_body(400, said)
        try:
            if kind == "chat":
                return 200, {}, self._chat(body, model, fault)
            return 200, {}, self._embed(body)
        except Exception as err:  # a broken responder: say so, loudly, as a 500
            return 500, {}, error_body(500, f"stub responder failed: {err!r}")

    def _chat(self, body: dict[str, Any], model: str, fault: Fault | None) -> dict[str, Any]:
        if fault is not None and fault.text is not None:
            text = fault.text
        else:
            answer = self.chat_responder(body)
            text = answer if isinstance(answer, str) else json.dumps(answer)
        tokens_in = token_estimate(system_text(body)) + token_estimate(prompt_text(body))
        tokens_out = token_estimate(text)
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": tokens_in,
                "candidatesTokenCount": tokens_out,
                "totalTokenCount": tokens_in + tokens_out,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens_in}],
            },
            "modelVersion": model,
            "responseId": f"stub-{self.count('chat')}",
        }

    def _embed(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = embed_texts(body)
        first = (body.get("requests") or [body])[0]
        dims = int(first.get("outputDimensionality") or 3072)
        vectors = self.embed_responder(texts, dims)
        if "requests" in body:
            return {"embeddings": [{"values": v} for v in vectors]}
        return {"embedding": {"values": vectors[0]}}


def _handler_for(stub: GeminiStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "GeminiStub/1"
        # Keep-alive, as the real API: HTTP/1.0 would make the SDK reconnect for every call,
        # a cost production never pays (and the write benchmark would count it).
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # our answer's headers and body leave at once

        def _ack_at_once(self) -> None:
            # The client writes a request's headers and body apart; with keep-alive, Linux
            # delays our ACK of the first part 40 ms and the client's Nagle waits for it.
            quickack = getattr(socket, "TCP_QUICKACK", None)
            if quickack is not None:
                self.connection.setsockopt(socket.IPPROTO_TCP, quickack, 1)

        def handle_one_request(self) -> None:
            self._ack_at_once()
            super().handle_one_request()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass  # quiet: pytest shows the records when a test fails

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's naming
            self._ack_at_once()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, payload = stub._answer(self.path, headers, raw)
            data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (a hang fault): nothing to answer

        def do_GET(self) -> None:  # noqa: N802
            self.do_POST()

    return Handler
