"""`memory-worker serve`: the page on loopback, for one person's local use or an app's reference.

Binds 127.0.0.1 unless told otherwise (and says so loudly when told). With `--user N` it mints
a one-time sign-in link for that user and prints it; the link works once, for 15 minutes.
The store must exist (`memory-worker init-db`); the toast channel is the broker's Redis when
one is running, else the rail reads the store every few seconds.
"""

from __future__ import annotations

import ipaddress
import sys

from sqlalchemy.exc import SQLAlchemyError

from memory_worker import embedded, store
from memory_worker import settings as settings_mod
from memory_worker.settings import EMBEDDED
from memory_worker.storage import users

DEFAULT_HOST = "127.0.0.1"  # loopback only: this page shows what personas remember
DEFAULT_PORT = 8420
SHUTDOWN_GRACE_S = 2  # open rail streams never end by themselves; don't wait on them long


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


def check_store(user_id: int | None) -> None:
    """Fail at start, naming what to do, when the store is missing or the user unknown."""
    try:
        with store.engine().connect() as conn:
            users.user_names(conn, [0])  # the users table answers
            if user_id is not None:
                users.require_user(conn, user_id)
    except SQLAlchemyError as e:
        raise LookupError(
            f"no store at MW_DATABASE_URL ({settings_mod.current().database_url}): "
            f"run `memory-worker init-db` first ({type(e).__name__})"
        ) from e


def run(host: str, port: int, user_id: int | None, rail_poll_s: float) -> int:
    import uvicorn

    from memory_worker.web.app import LOOPBACK_HOSTS, create_app
    from memory_worker.web.security import LoginLinks, check_secret

    s = settings_mod.current()
    try:
        secret = check_secret(s.web_secret)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    check_store(user_id)
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
    base = f"http://{shown}:{port}"
    if not is_loopback(host):
        print(
            f"warning: serving on {host}, beyond loopback: anyone who can reach it can try to "
            "sign in. Put TLS and your own sign-in in front.",
            file=sys.stderr,
        )
    print(f"memory-worker serve: {base}/  (store {s.database_url})")
    print(f"toasts: {'Redis channel + the store' if redis_url else 'read from the store'}")
    if user_id is not None:
        link = f"{base}/login?token={links.mint(user_id)}"
        print(f"sign in as u:{user_id} (one-time link, 15 min): {link}")
    sys.stdout.flush()
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # a sign-in link's token is in its URL
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    return 0
