"""`memory-worker check`: what a deployer needs to know before trusting a deployment.

Each check says what it found in one line — the settings, the store (reachable, migrated to
the newest revision), the broker (reachable), the model provider (ready: a key, a cassette),
the rate limits in force — and the command exits non-zero when any of them is a problem.
URLs are shown with their passwords redacted; the API key only as "set".

A store that is not ready is one of four things, each said differently with its own fix
(`require_ready`, `EMPTY_HINT`): the server refuses the connection, the database does not
exist, it is not migrated, or it is migrated but empty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memory_worker.core.errors import BrokerEvicts, ScopeNotAllowed, StoreNotReady
from memory_worker.core.settings import EMBEDDED, Settings, redact

INIT_HINT = "run `memory-worker init-db`"


@dataclass(frozen=True)
class Finding:
    what: str
    ok: bool
    detail: str


def store_revision(url: str) -> tuple[str | None, str]:
    """(the store's revision or None when never initialised, the newest revision we ship)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from memory_worker.storage import store

    head = ScriptDirectory.from_config(store.alembic_config(url)).get_current_head()
    with store.engine(url).connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current, str(head)


def require_migrated(url: str) -> None:
    """Raise StoreNotReady, saying what to run, unless the store is at the newest revision."""
    current, head = store_revision(url)
    if current is None:
        raise StoreNotReady(f"the store {redact(url)} is not initialised: {INIT_HINT}")
    if current != head:
        raise StoreNotReady(
            f"the store {redact(url)} is at revision {current}, the code needs {head}: {INIT_HINT}"
        )


def require_scope(s: Settings) -> None:
    """Raise ScopeNotAllowed, naming the command to run, unless the scope in force may start
    (the proven scope always may; the group scope on a passing verdict or the override)."""
    from memory_worker.storage import store, verdicts

    if s.memory_scope != "follow":
        return
    with store.engine(s.database_url).connect() as conn:
        verdicts.require_scope(conn, s)


def require_ready(url: str) -> None:
    """Raise StoreNotReady, saying which of the store's problems it is and its fix, unless the
    store answers and is at the newest revision (it may still be empty: `is_empty`)."""
    try:
        require_migrated(url)
    except StoreNotReady:
        raise
    except Exception as e:  # unreachable, no such database, bad credentials, missing driver
        raise StoreNotReady(unreachable(url, e)) from None


def unreachable(url: str, e: BaseException) -> str:
    """What a failed connection to the store means, with its fix (never the password)."""
    from sqlalchemy import make_url

    said = str(getattr(e, "orig", e)).lower()
    shown = redact(url)
    database = make_url(url).database or ""
    if "database" in said and "does not exist" in said:
        return (
            f"the store {shown} names a database the server does not have ({database!r}): "
            f"create it (`createdb {database}`), then {INIT_HINT}; or fix MW_DATABASE_URL"
        )
    if "unable to open database file" in said:
        return (
            f"the store {shown} cannot be created or opened (its folder is missing or not "
            "writable): fix the path in MW_DATABASE_URL"
        )
    if "refused" in said or "could not connect" in said or "timeout" in said:
        return (
            f"cannot reach the store {shown}: the connection was refused: start the database "
            "server, or fix the host and port in MW_DATABASE_URL"
        )
    if "password" in said or "authentication" in said:
        return f"the store {shown} refused the credentials: fix them in MW_DATABASE_URL"
    return f"cannot open the store {shown}: {_short(e)}: check MW_DATABASE_URL"


EMPTY_HINT = "no users or rooms yet: your app adds them as people talk"


def is_empty(url: str) -> bool:
    """Whether a ready store holds no human yet (then every user and room is "unknown")."""
    from memory_worker.storage import store, users

    with store.engine(url).connect() as conn:
        return not users.has_users(conn)


FULL_BELOW_BYTES = 1 << 20  # a SQLite store's filesystem with less free is full: writes fail


def sqlite_free_bytes(url: str) -> int | None:
    """Free bytes on the filesystem of a SQLite store's file (None: not SQLite, or no file)."""
    import shutil
    from pathlib import Path

    from sqlalchemy import make_url

    u = make_url(url)
    if not u.drivername.startswith("sqlite") or not u.database or u.database == ":memory:":
        return None
    try:
        return shutil.disk_usage(Path(u.database).resolve().parent).free
    except OSError:
        return None


def full_store(url: str, free: int | None) -> str | None:
    """What `check` says of a store whose disk is full (None: it has room, or cannot tell —
    a server's disk is its own: the workers' /healthz says when it refuses writes)."""
    if free is None or free >= FULL_BELOW_BYTES:
        return None
    return (
        f"the store {redact(url)} is full: {free:,} bytes free on its disk; writes fail "
        '("database or disk is full") and the workers wait: free space on that disk'
    )


def _store(s: Settings) -> Finding:
    try:
        require_ready(s.database_url)
        empty = is_empty(s.database_url)
    except StoreNotReady as e:
        return Finding("store", False, str(e))
    except Exception as e:  # a driver or schema surprise: named, never a trace
        return Finding("store", False, f"{redact(s.database_url)}: {_short(e)}")
    full = full_store(s.database_url, sqlite_free_bytes(s.database_url))
    if full:
        return Finding("store", False, full)
    state = f"migrated, empty: {EMPTY_HINT}" if empty else "migrated"
    return Finding("store", True, f"{redact(s.database_url)} ({state})")


SUGGESTED_MAXMEMORY = "256mb"  # what the embedded broker sets (core.constants), for a warning


def broker_memory(url: str) -> str:
    """What the broker's memory settings mean, in one phrase; BrokerEvicts (one line naming
    the setting) when its maxmemory-policy evicts keys — queued tasks among them. Without a
    limit memory is the host's (a warning, with the figure to set); a server that answers
    neither CONFIG GET nor INFO is said to be unread."""
    import redis

    from memory_worker.ops import broker

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    with client:
        got = broker.memory_settings(client)
    if got.evicting:
        raise BrokerEvicts(
            f"the broker's maxmemory-policy is {got.policy}: an evicting policy drops queued "
            "tasks when memory runs out; set maxmemory-policy noeviction"
        )
    if got.maxmemory is None or got.policy is None:
        return (
            "warning: its memory settings could not be read (CONFIG GET refused): make sure "
            "maxmemory-policy is noeviction"
        )
    if not got.maxmemory:
        return (
            f"warning: {got.policy} without maxmemory: a backlog may take the host's memory; "
            f"set maxmemory (e.g. {SUGGESTED_MAXMEMORY}), keeping noeviction"
        )
    return f"{got.policy}, maxmemory {got.maxmemory:,} bytes"


def _broker(s: Settings) -> Finding:
    import redis

    from memory_worker.ops import embedded

    if s.broker_url == EMBEDDED:
        url = embedded.running_url(s.state_dir)
        if url is None:
            started_by = f"the first process starts it under {s.state_dir}"
            return Finding("broker", True, f"embedded, not running ({started_by})")
        shown = f"embedded, {redact(url)}"
    else:
        url, shown = s.broker_url, redact(s.broker_url)
    try:
        memory = broker_memory(url)
    except BrokerEvicts as e:
        return Finding("broker", False, f"{shown}: {e}")
    except (redis.RedisError, OSError) as e:
        return Finding("broker", False, f"{shown}: {_short(e)}")
    return Finding("broker", True, f"{shown} ({memory})")


def _provider(s: Settings) -> Finding:
    problems = s.provider_problems()
    if not problems and s.provider == "replay" and s.cassette is not None:
        from memory_worker.core.errors import ModelError
        from memory_worker.models.replay import load_cassette

        try:
            n = len(load_cassette(s.cassette))
        except ModelError as e:
            problems = [str(e)]
        else:
            return Finding("provider", True, f"replay, {n} scripted answers in {s.cassette}")
    if problems:
        return Finding("provider", False, "; ".join(problems))
    where = s.gemini_base_url or "the Gemini API"
    return Finding(
        "provider", True, f"gemini ({s.chat_model}, {s.embed_model}) at {where}, key set"
    )


def _limits(s: Settings) -> Finding:
    from memory_worker.ops.ratelimit import Quota

    q = Quota.per_minute(s.model_requests_per_minute, s.model_tokens_per_minute)
    return Finding(
        "rate limits",
        True,
        f"{plain(s.model_requests_per_minute)} requests/min ({q.requests} per "
        f"{plain(q.window_s)} s sliding), {plain(s.model_tokens_per_minute)} tokens/min, "
        "shared by all workers",
    )


def plain(x: float) -> str:
    """A number as a person writes it: 1,000,000 and 0.5, never 1e+06."""
    return f"{int(x):,}" if x == int(x) else f"{x:,}"


def _short(e: BaseException) -> str:
    return redact(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")[:300]


def _scope(s: Settings) -> Finding:
    if s.memory_scope != "follow":
        return Finding("scope", True, "proven: groups hear world facts only (MW_MEMORY_SCOPE)")
    try:
        require_scope(s)
    except ScopeNotAllowed as e:
        return Finding("scope", False, str(e))
    except Exception as e:  # the store's own problem is its check's to say
        return Finding("scope", False, f"follow: the verdicts could not be read ({_short(e)})")
    if s.memory_scope_override:
        how = "MW_MEMORY_SCOPE_OVERRIDE set"
        opened: list[str] = []
    else:
        how = "opened by the leak exam verdicts below"
        opened = opened_review(s)
    said = f"follow: memories follow people into groups ({how})"
    return Finding("scope", True, "\n".join([said, *opened]))


def opened_review(s: Settings) -> list[str]:
    """The verdicts that open the gate, as a block a deployer pastes into a review."""
    from memory_worker.storage import store, verdicts

    with store.engine(s.database_url).connect() as conn:
        return verdicts.opened_review(conn, s)


CHECKS: tuple[Callable[[Settings], Finding], ...] = (
    _store,
    _broker,
    _provider,
    _limits,
    _scope,
)


def run(s: Settings) -> list[Finding]:
    """Every check, in order (the settings themselves were checked when they were read)."""
    return [check(s) for check in CHECKS]
