"""Who the request is, and the guards every route shares.

- **Sign-in**: one-time login links (`LoginLinks`), minted by `memory-worker serve --user N`
  for local use; an app puts its own sign-in in front and mints the same way.
- **Session**: Starlette's signed cookie (itsdangerous), HttpOnly and SameSite=Strict; it
  holds the user id and the CSRF token, nothing else.
- **CSRF**: every form carries the session's token in a hidden field, every API write in the
  `X-CSRF-Token` header; a write without it changes nothing.
- **Headers**: a strict Content-Security-Policy (no inline script or style), no framing, no
  sniffing, no referrer, no caching of a page full of personal data.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOGIN_LINK_TTL_S = 15 * 60  # a link printed in a terminal: used within minutes, or never
SESSION_MAX_AGE_S = 8 * 60 * 60  # a working day; then sign in again
SESSION_COOKIE = "mw_session"
CSRF_FIELD = "csrf"  # the hidden form field
CSRF_HEADER = "x-csrf-token"  # the API's header
SECRET_MIN_CHARS = 32  # MW_WEB_SECRET signs the session cookie: short secrets are guessable

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=()",
    "cache-control": "no-store",
}


@dataclass
class LoginLinks:
    """One-time sign-in tokens held in this process's memory: a restart voids them all."""

    ttl_s: float = LOGIN_LINK_TTL_S

    def __post_init__(self) -> None:
        self._tokens: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def mint(self, user_id: int) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = (int(user_id), time.monotonic() + self.ttl_s)
        return token

    def redeem(self, token: str) -> int | None:
        """The user the token signs in, once; None for a used, expired or unknown token."""
        with self._lock:
            found = self._tokens.pop(token, None)
        if found is None or time.monotonic() > found[1]:
            return None
        return found[0]


def sign_in(request: Request, user_id: int) -> None:
    """A fresh session for the user: nothing from before survives (no session fixation)."""
    request.session.clear()
    request.session["user_id"] = int(user_id)
    request.session[CSRF_FIELD] = secrets.token_urlsafe(32)


def signed_in_user(request: Request) -> int | None:
    uid = request.session.get("user_id")
    return uid if isinstance(uid, int) and not isinstance(uid, bool) else None


def csrf_token(request: Request) -> str:
    return str(request.session.get(CSRF_FIELD, ""))


def csrf_ok(request: Request, supplied: object) -> bool:
    """The supplied token matches the session's (constant time); a missing one never does."""
    expected = csrf_token(request)
    if not expected or not isinstance(supplied, str) or not supplied:
        return False
    return secrets.compare_digest(expected.encode(), supplied.encode())


class SecurityHeaders:
    """ASGI middleware: the headers above on every response, streams included."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode().lower() != "cache-control"
                ]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def check_secret(secret: str | None) -> str:
    """MW_WEB_SECRET as given, or a random one for this process (sessions end at restart)."""
    if secret is None:
        return secrets.token_urlsafe(48)
    if len(secret) < SECRET_MIN_CHARS:
        raise ValueError(f"MW_WEB_SECRET must be at least {SECRET_MIN_CHARS} characters")
    return secret
