"""The outermost layer of the page's app: what every request meets before anything parses it.

An attacker's request is refused here, cheaply, before a route, the session or a parser sees
it, and every answer — a refusal, an error, a crash — leaves with the security headers:

- **Bounded bodies.** A `Content-Length` over `MW_WEB_MAX_BODY_BYTES` is a 413 before one
  byte is read; a body without one (chunked) is counted as it streams and is a 413 as soon as
  it passes the limit; a body still incomplete after `WEB_BODY_TIMEOUT_S` (a slowloris) is a
  408. So a request never holds more than the limit in memory, however it is sent.
- **Same origin for writes.** A state-changing request whose `Origin` (or, without one, its
  `Referer`) is not this server's own is a 403, beside the CSRF token the routes check.
- **No traceback out.** An exception is a plain 500 ("internal error") with the headers; the
  log gets one line naming the route and the exception's type, never its message or a trace.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memory_worker.core.constants import WEB_BODY_TIMEOUT_S, WEB_JSON_MAX_DEPTH
from memory_worker.core.errors import BadRequest, Refused
from memory_worker.core.numbers import is_ascii_number
from memory_worker.web.security import SECURITY_HEADERS

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # change nothing, so need no origin
HANG_UP = frozenset({400, 408, 413})  # refusals of a body the server will not read further


def refusal(path: str, status: int, message: str) -> Response:
    """The API answers JSON, the page plain text; both say what was wrong. A refused body is
    not drained: the connection closes, or the server would go on reading what it refused."""
    headers = {"connection": "close"} if status in HANG_UP else None
    if path.startswith("/api/"):
        body = {"ok": False, "error": message}
        return JSONResponse(body, status_code=status, headers=headers)
    return PlainTextResponse(message, status_code=status, headers=headers)


async def on_refused(request: Request, exc: Exception) -> Response:
    """The app's handler for `Refused` raised inside a route (a body read past the limit)."""
    assert isinstance(exc, Refused)
    return refusal(request.url.path, exc.status, exc.message)


def secured(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A response's headers with ours in force (ours replace any the route set, e.g. caching)."""
    ours = {k.encode() for k in SECURITY_HEADERS}
    kept = [(k, v) for k, v in headers if k.lower() not in ours]
    return kept + [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


def foreign_origin(scope: Scope) -> str | None:
    """The other origin a write came from, or None when it is ours (or a non-browser's).

    Browsers send `Origin` on every POST ("null" when hidden: refused too); without it the
    `Referer` decides; with neither it is not a browser, and the CSRF token alone decides.
    """
    headers = Headers(scope=scope)
    own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
    origin = headers.get("origin")
    if origin is None:
        referer = headers.get("referer")
        if not referer:
            return None
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return None if origin == own else origin


def declared_length(scope: Scope) -> int | None:
    """The body's `Content-Length`, None without one; Refused when it is not a number."""
    raw = Headers(scope=scope).get("content-length")
    if raw is None:
        return None
    if not is_ascii_number(raw.strip()):
        raise Refused(400, "Content-Length must be a whole number")
    return int(raw)


class Guard:
    """ASGI middleware: bounded input, same-origin writes, headers and no traceback, always."""

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float = WEB_BODY_TIMEOUT_S
    ):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = secured(list(message.get("headers", [])))
            await send(message)

        path = str(scope.get("path", ""))
        try:
            self._check_headers(scope)
            await self.app(scope, self._bounded(receive), send_secured)
        except Refused as e:
            if not started:
                await refusal(path, e.status, e.message)(scope, receive, send_secured)
        except Exception as e:  # a bug: a plain 500, one log line, no trace anywhere
            log.error("%s %s failed: %s", scope.get("method"), path, type(e).__name__)
            if not started:
                await refusal(path, 500, "internal error")(scope, receive, send_secured)

    def _check_headers(self, scope: Scope) -> None:
        length = declared_length(scope)
        if length is not None and length > self.max_body_bytes:
            raise Refused(413, self._too_large())
        if scope.get("method") not in SAFE_METHODS:
            other = foreign_origin(scope)
            if other is not None:
                raise Refused(403, "a write from another origin is refused")

    def _too_large(self) -> str:
        return f"the request body is over the limit of {self.max_body_bytes} bytes"

    def _bounded(self, receive: Receive) -> Receive:
        """`receive`, counting the body and timing it; past the body, untouched (streams)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        total = 0
        body_done = False

        async def bounded() -> Message:
            nonlocal total, body_done
            if body_done:  # a stream's wait for the client to go away: no deadline
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise Refused(408, "the request body came too slowly") from None
            if message["type"] != "http.request":
                body_done = True
                return message
            total += len(message.get("body", b""))
            if total > self.max_body_bytes:
                raise Refused(413, self._too_large())
            body_done = not message.get("more_body", False)
            return message

        return bounded


def parse_json(raw: bytes, max_depth: int = WEB_JSON_MAX_DEPTH) -> Any:
    """The body as JSON, refusing (BadRequest) nesting deeper than `max_depth` before parsing:
    `[` × 200,000 would otherwise end in a RecursionError inside the parser."""
    text = raw.decode("utf-8", "replace")
    if _deeper_than(text, max_depth):
        raise BadRequest(f"the body nests deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequest(f"the body is not JSON: {e.msg}") from e


def _deeper_than(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than `limit` (a scan, no recursion)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False
