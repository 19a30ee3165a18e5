"""`memory-worker serve`: the page on loopback, for one person's local use or an app's reference.

Binds 127.0.0.1 unless told otherwise (and says so loudly when told), and binds *before* it
prints anything: a taken port is an error and no link (a printed link would point at whatever
holds the port). With `--user N` it mints a one-time sign-in link for that user and prints it;
the link works once, for 15 minutes. The store must be ready (`memory-worker init-db`; the
command checks it first); the banner names it, password redacted, and says when it is empty.
The toast channel is the broker's Redis when one is running, else the rail reads the store
every few seconds.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import sys

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import WEB_HEADER_TIMEOUT_S, WEB_MAX_CONNECTIONS
from memory_worker.core.errors import CannotListen, ConfigError
from memory_worker.core.settings import EMBEDDED, redact
from memory_worker.ops import embedded
from memory_worker.storage import store, users

DEFAULT_HOST = "127.0.0.1"  # loopback only: this page shows what personas remember
DEFAULT_PORT = 8420
SHUTDOWN_GRACE_S = 2  # open rail streams never end by themselves; don't wait on them long
BACKLOG = 2048  # uvicorn's own default listen backlog


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def toast_redis_url(s: settings_mod.Settings) -> str | None:
    """The Redis the worker announces toasts on; None when there is none to listen to."""
    if s.broker_url == EMBEDDED:
        return embedded.running_url(s.state_dir)  # never start one just to listen
    return s.broker_url


def check_user(user_id: int | None) -> None:
    """UnknownUser naming the user when `--user` names no one in the (ready) store."""
    if user_id is None:
        return
    with store.engine().connect() as conn:
        users.require_user(conn, user_id)


def head_deadline_protocol(timeout_s: float = WEB_HEADER_TIMEOUT_S) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, hanging up on a request head that does not arrive in time.

    uvicorn times the wait *between* requests (keep-alive) but not a head that trickles in a
    byte at a time (a slowloris): such a connection would be held for as long as the client
    likes, and enough of them fill `WEB_MAX_CONNECTIONS`. Here every connection, and every
    keep-alive wait after a response, gets `timeout_s` to start its next request.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadline(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
            waiting_after = self.cycle  # the request before the head we wait for (or None)
            self.head_timer = self.loop.call_later(
                timeout_s, self._hang_up_unless_started, waiting_after
            )

        def _hang_up_unless_started(self, waiting_after: object) -> None:
            if self.cycle is waiting_after and not self.transport.is_closing():
                self.transport.close()  # no new request began in time

    return HeadDeadline


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, bound now, so a taken port fails before any link."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only, not a listener
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        why = "the port is taken" if e.errno == errno.EADDRINUSE else (e.strerror or str(e))
        raise CannotListen(
            f"cannot listen on {host}:{port}: {why}: stop what holds it, or pass --port "
            "(--port 0: any free port)"
        ) from None
    sock.set_inheritable(True)
    return sock


def banner(base: str, database_url: str, *, empty: bool, toasts_on_redis: bool) -> list[str]:
    """What serve says once it listens: where, which store (its password redacted), toasts."""
    from memory_worker.check import EMPTY_HINT

    state = f" — empty: {EMPTY_HINT}" if empty else ""
    return [
        f"memory-worker serve: {base}/  (store {redact(database_url)}{state})",
        f"toasts: {'Redis channel + the store' if toasts_on_redis else 'read from the store'}",
    ]


def scope_line(s: settings_mod.Settings) -> str:
    """The scope this process serves the page under, said at start as every process says it
    (the group scope's gate was passed before serve got here: `cli._ready_store`)."""
    if s.memory_scope != "follow":
        return "scope: proven (groups hear world facts only; MW_MEMORY_SCOPE)"
    how = "MW_MEMORY_SCOPE_OVERRIDE" if s.memory_scope_override else "its leak exam verdicts"
    return f"scope: follow (memories follow people into groups, on {how})"


def run(host: str, port: int, user_id: int | None, rail_poll_s: float, empty: bool) -> int:
    """Serve until stopped; 2 (said on stderr) when the secret, the user or the port is wrong.
    `empty`: the store holds no one yet, which the banner says."""
    import uvicorn

    from memory_worker.web.app import LOOPBACK_HOSTS, create_app
    from memory_worker.web.security import LoginLinks, Sessions, check_secret

    s = settings_mod.current()
    try:
        secret = check_secret(s.web_secret)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    check_user(user_id)
    try:
        sock = listen(host, port)
    except CannotListen as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Sessions(secret).end_stale()  # a rotated secret's sessions, and expired ones: gone
    links = LoginLinks()
    redis_url = toast_redis_url(s)
    hosts = LOOPBACK_HOSTS if is_loopback(host) else [*LOOPBACK_HOSTS, host]
    app = create_app(
        secret_key=secret,
        login_links=links,
        redis_url=redis_url,
        allowed_hosts=hosts,
        rail_poll_s=rail_poll_s,
    )
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{sock.getsockname()[1]}"
    if not is_loopback(host):
        print(
            f"warning: serving on {host}, beyond loopback: anyone who can reach it can try to "
            "sign in. Put TLS and your own sign-in in front.",
            file=sys.stderr,
        )
    print(scope_line(s))
    print("\n".join(banner(base, s.database_url, empty=empty, toasts_on_redis=bool(redis_url))))
    if user_id is not None:
        link = f"{base}/login?token={links.mint(user_id)}"
        print(f"sign in as u:{user_id} (one-time link, 15 min): {link}")
    sys.stdout.flush()
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,  # a sign-in link's token is in its URL
        server_header=False,
        proxy_headers=False,
        http=head_deadline_protocol(),  # a slowloris's head is hung up on
        limit_concurrency=WEB_MAX_CONNECTIONS,  # beyond it a 503, not one more buffer
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0
