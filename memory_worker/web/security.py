"""Who the request is, and the guards every route shares.

- **Sign-in**: one-time login links (`LoginLinks`), minted by `memory-worker serve --user N`
  for local use; an app puts its own sign-in in front and mints the same way.
- **Session**: held by the server (`Sessions`, in the store): Starlette's signed cookie
  (itsdangerous), HttpOnly and SameSite=Strict, carries only a random session id. Sign-out,
  "sign out everywhere", expiry and a new MW_WEB_SECRET end the session for every copy of
  the cookie, since the server no longer holds what it names.
- **CSRF**: every form carries the session's token in a hidden field, every API write in the
  `X-CSRF-Token` header; a write without it changes nothing (and `guard` refuses a write
  from another origin before it reaches a route).
- **Headers**: a strict Content-Security-Policy (no inline script or style), no framing, no
  sniffing, referrers only to ourselves, no caching of a page full of personal data;
  `guard.Guard` puts them on every response, errors included.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from memory_worker.core.constants import WEB_SESSION_MAX_AGE_S
from memory_worker.core.errors import BadCursor, ConfigError
from memory_worker.storage import store, web_sessions
from memory_worker.storage.web_sessions import WebSession

LOGIN_LINK_TTL_S = 15 * 60  # a link printed in a terminal: used within minutes, or never
SESSION_MAX_AGE_S = WEB_SESSION_MAX_AGE_S
SESSION_ID = "sid"  # the one thing the cookie holds (besides a one-shot "done" message)
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
    # Not "no-referrer": under it a browser sends `Origin: null` on its own same-origin
    # POSTs, and the origin check could not tell them from a forged one.
    "referrer-policy": "same-origin",
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


class Sessions:
    """The sessions the server holds, under one MW_WEB_SECRET (blocking: call off the loop)."""

    def __init__(self, secret: str, max_age_s: int = SESSION_MAX_AGE_S):
        # Which secret minted a session; a rotated secret's sessions are found by no one.
        self.secret_tag = hmac.new(secret.encode(), b"web_sessions", "sha256").hexdigest()[:16]
        self.max_age_s = max_age_s

    def start(self, user_id: int) -> str:
        """A new session for the user: the id for the cookie (the store keeps its hash)."""
        sid = secrets.token_urlsafe(32)
        now = int(time.time())
        with store.transaction() as conn:
            web_sessions.start(
                conn,
                id_hash=_hash(sid),
                user_id=int(user_id),
                csrf=secrets.token_urlsafe(32),
                secret_tag=self.secret_tag,
                now=now,
                expires=now + self.max_age_s,
            )
        return sid

    def find(self, sid: str) -> WebSession | None:
        with store.engine().connect() as conn:
            found = web_sessions.find(
                conn, _hash(sid), secret_tag=self.secret_tag, now=int(time.time())
            )
        return found

    def end(self, sid: str) -> None:
        with store.transaction() as conn:
            web_sessions.end(conn, _hash(sid))

    def end_all(self, user_id: int) -> int:
        with store.transaction() as conn:
            return web_sessions.end_all_of(conn, user_id)

    def end_stale(self) -> int:
        """Expired sessions and a rotated secret's: gone (`serve` runs this at start)."""
        with store.transaction() as conn:
            return web_sessions.end_stale(conn, secret_tag=self.secret_tag, now=int(time.time()))


def _hash(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def _sessions(request: Request) -> Sessions:
    found: Sessions = request.app.state.sessions
    return found


async def current(request: Request) -> WebSession | None:
    """The live session the request's cookie names (looked up once per request), or None."""
    if hasattr(request.state, "web_session"):
        cached: WebSession | None = request.state.web_session
        return cached
    sid = request.session.get(SESSION_ID)
    found = None
    if isinstance(sid, str) and sid:
        found = await run_in_threadpool(_sessions(request).find, sid)
    request.state.web_session = found
    return found


async def signed_in_user(request: Request) -> int | None:
    session = await current(request)
    return None if session is None else session.user_id


async def sign_in(request: Request, user_id: int) -> None:
    """A fresh session for the user: nothing from before survives (no session fixation)."""
    request.session.clear()
    request.session[SESSION_ID] = await run_in_threadpool(_sessions(request).start, user_id)
    request.state.web_session = None  # looked up afresh by the next request


async def sign_out(request: Request, *, everywhere: bool = False) -> None:
    """End this session (or every session of its user) for every copy of the cookie."""
    session = await current(request)
    sid = request.session.get(SESSION_ID)
    request.session.clear()
    request.state.web_session = None
    if session is None or not isinstance(sid, str):
        return
    if everywhere:
        await run_in_threadpool(_sessions(request).end_all, session.user_id)
    else:
        await run_in_threadpool(_sessions(request).end, sid)


def still_live(request: Request) -> Callable[[], Awaitable[bool]]:
    """For a long answer (the rail's stream): whether the request's session still lives, asked
    again later, after the request itself is done with."""
    sid = request.session.get(SESSION_ID)
    sessions = _sessions(request)

    async def live() -> bool:
        return isinstance(sid, str) and await run_in_threadpool(sessions.find, sid) is not None

    return live


def csrf_token(request: Request) -> str:
    """The session's CSRF token ("" signed out); `current` must have run for the request."""
    session: WebSession | None = getattr(request.state, "web_session", None)
    return "" if session is None else session.csrf


def csrf_ok(request: Request, supplied: object) -> bool:
    """The supplied token matches the session's (constant time); a missing one never does."""
    expected = csrf_token(request)
    if not expected or not isinstance(supplied, str) or not supplied:
        return False
    return secrets.compare_digest(expected.encode(), supplied.encode())


# --- page cursors: the server's own, signed ----------------------------------------------------


CURSOR_MAC_BYTES = 16  # 128 bits: a forged cursor is guessed never


def cursor_key(secret: str) -> bytes:
    """The key that signs page cursors, derived from MW_WEB_SECRET (apart from the cookie's)."""
    return hmac.new(secret.encode(), b"page_cursors", "sha256").digest()


def _cursor_mac(key: bytes, user_id: int, query: str | None, plain: str) -> str:
    said = f"{user_id}\0{query or ''}\0{plain}".encode()
    mac = hmac.new(key, said, "sha256").digest()[:CURSOR_MAC_BYTES]
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def sign_cursor(key: bytes, user_id: int, query: str | None, plain: str) -> str:
    """A page cursor as the page hands it out: bound to the user and the search it walks."""
    return f"{plain}.{_cursor_mac(key, user_id, query, plain)}"


def open_cursor(key: bytes, user_id: int, query: str | None, signed: str | None) -> str | None:
    """The cursor `sign_cursor` signed for this user and search (None: none given);
    BadCursor for any other — forged, garbled, another user's, another search's."""
    if not signed:
        return None
    plain, _, mac = signed.rpartition(".")
    expected = _cursor_mac(key, user_id, query, plain)
    if not plain or not secrets.compare_digest(expected.encode(), mac.encode("utf-8", "replace")):
        raise BadCursor("not a page cursor")
    return plain


def check_secret(secret: str | None) -> str:
    """MW_WEB_SECRET as given, or a random one for this process (sessions end at restart)."""
    if secret is None:
        return secrets.token_urlsafe(48)
    if len(secret) < SECRET_MIN_CHARS:
        raise ConfigError(f"MW_WEB_SECRET must be at least {SECRET_MIN_CHARS} characters")
    return secret
