"""What a worker or beat process does as it starts: check the config, step back, serve metrics.

Connected to Celery's signals by `memory_worker.tasks.celery_app`. A bad setting, a provider that
lacks what it needs (a key, a cassette) or a store that was never initialised stops the
process at once with the variable or the command named — not every spell an hour later.
"""

from __future__ import annotations

import logging
import os

from sqlalchemy import text

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import QUEUES
from memory_worker.core.errors import ConfigError, ScopeNotAllowed, StoreNotReady

log = logging.getLogger(__name__)


class CannotStart(SystemExit):
    """The process must not start; the message says why and what to set or run."""


def check_worker_can_start() -> None:
    """Settings valid, the provider ready, the store migrated, the scope allowed — or
    CannotStart."""
    from memory_worker import check

    try:
        s = settings_mod.current()
    except ConfigError as e:
        raise CannotStart(f"memory-worker: {e}") from None
    problems = s.provider_problems()
    if problems:
        raise CannotStart("memory-worker: cannot start: " + "; ".join(problems))
    try:
        check.require_migrated(s.database_url)
    except StoreNotReady as e:
        raise CannotStart(f"memory-worker: cannot start: {e}") from None
    except Exception as e:  # unreachable now: the tasks retry; say it and carry on
        log.error("the store is not reachable at start: %s", type(e).__name__)
    require_scope_at_start(s)


def yield_cores() -> int:
    """Lower this process's CPU priority by MW_WORKER_NICE (its children inherit it), so the
    write path yields the cores to the app's reads on a shared host; the niceness now."""
    step = settings_mod.current().worker_nice
    return os.nice(step)


def check_beat_can_start() -> None:
    """Settings valid and the scope allowed: beat enqueues the sweeps that drive the write
    path, so under the group scope it needs the verdict as much as a worker does."""
    try:
        s = settings_mod.current()
    except ConfigError as e:
        raise CannotStart(f"memory-worker: {e}") from None
    require_scope_at_start(s)


def require_scope_at_start(s: settings_mod.Settings) -> None:
    """CannotStart unless the scope in force may start on the store (checked once, with the
    store's own failure named); the scope is logged either way (`storage.verdicts`)."""
    from memory_worker import check

    if s.memory_scope != "follow":
        log.info("MW_MEMORY_SCOPE=proven: groups hear world facts only")
        return
    try:
        check.require_scope(s)
    except ScopeNotAllowed as e:
        raise CannotStart(f"memory-worker: cannot start: {e}") from None
    except Exception as e:  # no verdict can be read: the group scope must not start blind
        raise CannotStart(
            f"memory-worker: cannot start: MW_MEMORY_SCOPE=follow, and the store that holds its "
            f"leak exam verdicts could not be read ({type(e).__name__})"
        ) from None


def queue_depths() -> dict[str, int]:
    from memory_worker.ops import broker

    client = broker.client(broker.url())
    return {q: int(client.llen(q)) for q in QUEUES}


def broker_full() -> bool:
    from memory_worker.ops import broker

    return broker.fullness(broker.client(broker.url())) is not None


def health() -> dict[str, str]:
    """The checks behind /healthz: the broker answers PING and has memory left (else "full"),
    the store answers SELECT 1 and took this process's last write (else "full": a full disk
    or a server out of memory refuses writes while reads go on)."""
    from memory_worker.ops import broker, metrics
    from memory_worker.storage import store

    out = {}
    try:
        client = broker.client(broker.url())
        client.ping()
        out["broker"] = broker.fullness(client) or "ok"
    except Exception as e:
        out["broker"] = f"down ({type(e).__name__})"
    try:
        with store.engine().connect() as conn:
            conn.execute(text("SELECT 1"))
        full = metrics.store_full()
        out["store"] = "full (writes refused for space: free disk or memory)" if full else "ok"
    except Exception as e:
        out["store"] = f"down ({type(e).__name__})"
    return out


_served = False


def serve_metrics() -> None:
    """Serve /metrics and /healthz on 127.0.0.1:MW_METRICS_PORT, once per process (0: off)."""
    global _served
    port = settings_mod.current().metrics_port
    if _served or not port:
        return
    from prometheus_client import REGISTRY

    from memory_worker.ops import metrics

    REGISTRY.register(metrics.QueueDepth(queue_depths))
    REGISTRY.register(metrics.BrokerFull(broker_full))
    metrics.serve(port, health)
    _served = True
    log.info("metrics and /healthz on 127.0.0.1:%d", port)
