"""Prometheus metrics and a health endpoint, on loopback (prometheus-client).

Every worker process with `MW_METRICS_PORT` set serves `/metrics` and `/healthz` on
127.0.0.1:<port> (one port per process: the Procfile gives each line its own). The metrics
carry counts, seconds and queue names — never ids of people, never memory text.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

SPELLS = Counter("mw_spells", "Spells finished, by outcome", ["outcome"])
MODEL_CALLS = Counter(
    "mw_model_calls", "Model calls sent, by purpose and result", ["purpose", "result"]
)
MODEL_TOKENS = Counter("mw_model_tokens", "Model tokens, by direction (in/out)", ["direction"])
RETRIES = Counter("mw_task_retries", "Task retries scheduled, by task", ["task"])
RATE_WAIT = Histogram(
    "mw_rate_limit_wait_seconds",
    "Time a model call waited for the global quota",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
)
RATE_DEFERRED = Counter("mw_rate_limit_deferred", "Model calls handed back to the queue")
# 1 from the first write this process found refused for space (a full disk, a server out of
# memory) until its next write went through; /healthz says "full" meanwhile.
STORE_FULL = Gauge("mw_store_full", "1 while this process finds the store full")
_store_full = [False]


def store_full(full: bool | None = None) -> bool:
    """Whether this process last found the store full; `full` sets it (and the gauge)."""
    if full is not None:
        _store_full[0] = full
        STORE_FULL.set(int(full))
    return _store_full[0]


COMMIT_SECONDS = Histogram("mw_commit_seconds", "Time of one spell's commit transaction")
SPELL_SECONDS = Histogram(
    "mw_spell_seconds",
    "Time from a spell's start to its commit",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
)
# No room-open histogram: a room opens in the app's process (`memory_worker.reader`), which
# serves no /metrics and must not pay for prometheus-client; benchmarks/read_path.py times it.


class QueueDepth(Collector):
    """`mw_queue_depth{queue}`: messages waiting in each queue, read from Redis at scrape time."""

    def __init__(self, depths: Callable[[], dict[str, int]]):
        self.depths = depths

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("mw_queue_depth", "Messages waiting per queue", labels=["queue"])
        try:
            for queue, n in self.depths().items():
                g.add_metric([queue], n)
        except Exception as err:  # a scrape must not fail because the broker is down
            log.warning("queue depth unavailable: %s", type(err).__name__)
        yield g


class BrokerFull(Collector):
    """`mw_broker_full`: 1 while the broker is at its maxmemory (refusing writes), read from
    Redis at scrape time; absent when the broker does not answer."""

    def __init__(self, full: Callable[[], bool]):
        self.full = full

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            value = int(self.full())
        except Exception as err:  # a scrape must not fail because the broker is down
            log.warning("broker memory unavailable: %s", type(err).__name__)
            return
        yield GaugeMetricFamily("mw_broker_full", "1 while the broker refuses writes", value)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def app(health: Callable[[], dict[str, str]]) -> WsgiApp:
    """The WSGI app: /metrics (Prometheus), /healthz (200 when every check says ok, else 503)."""
    metrics = make_wsgi_app(REGISTRY)

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            checks = health()
            ok = all(v == "ok" for v in checks.values())
            body = "\n".join(f"{k}: {v}" for k, v in checks.items()).encode() + b"\n"
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8")],
            )
            return [body]
        out: Iterable[bytes] = metrics(environ, start_response)
        return out

    return serve


def serve(port: int, health: Callable[[], dict[str, str]]) -> WSGIServer:
    """Serve /metrics and /healthz on 127.0.0.1:`port` from a daemon thread."""
    server = make_server("127.0.0.1", port, app(health), _Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
