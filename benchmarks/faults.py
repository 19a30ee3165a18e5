"""Faults an operator meets, on real processes: what is lost, doubled or reopened, and how long
recovery takes.

    .venv/bin/python benchmarks/faults.py [--rooms 12] [--redis URL] [--database URL]

A stack of real processes — two Celery workers (2 threads each, every queue; for the store's
outages the Procfile's three, at its concurrency, as a deployer runs them) and a beat — on one
Redis database (embedded, or `--redis`, e.g. the host's db 15) and one store (a SQLite file, or
`--database`, e.g. PostgreSQL), with the real google-genai client at the stub. Each room is a
private chat of its own human, said in three bursts, each followed by `room_quiet`, each burst
waited for before the next:

    1: "I keep bees on the roof."  "I play cello in an orchestra."
    2: "I collect vintage train tickets."  "I study marine geology at night."
    3: "I no longer keep bees."  "I bake sourdough every sunday."

so every room should end with five rows — the bees closed by the third spell, four open —
each row in exactly one toast, every toast delivered. The faults, one run each:

    kill   SIGKILL a worker at random moments (every ~0.3–1 s), start it again
    wipe   FLUSHDB the broker every 0.15 s, 12 times: every queued and unacked message gone
    restart  SIGKILL the embedded Redis mid-run; it comes back on the same address (as
           `memory-worker run` brings it back) and the workers reconnect
    chaos  the model fails a third of calls: 429 (retryDelay 1 s), 500, timeouts, malformed
    twice  every room_quiet sent twice (the same spell enqueued twice)
    garbled  a third of the chat answers are JSON whose every item fails its schema (must be
           re-asked and retried, never taken as "nothing to remember")
    quota  the model quota far below the demand (MW_MODEL_RPM 120, every room at once): no
           spell may park for the quota, and the stub counts what reaches it per window
    coldstart  every room's first burst queued before any worker is up, then three workers
           of 8 threads started at once at MW_MODEL_RPM 300 (5 a second) and the default
           quota margin: the stub counts what reaches it in the first seconds and after
    pgdown5, pgdown30  the store on a private PostgreSQL of the run's own
           (`testing.private_postgres`), stopped abruptly mid-run and started again 5 s
           (30 s) later, as a deployer's restart would: every step waits it out
    sqlitelock  the SQLite file locked by another process (BEGIN EXCLUSIVE) for 30 s
           mid-run: every write waits it out
    diskfull  the SQLite store full for 45 s mid-run: the workers' connections held to the
           file's size (`PRAGMA max_page_count`, benchmarks/page_cap), so every write that
           needs a new page fails with "database or disk is full"; then the cap is lifted
    brokerfull  the broker full for 45 s mid-run: Redis's maxmemory set to what it uses
           (noeviction), so it refuses every write that grows it; then set back
    none   no fault: the model calls and times a fault's figures are read against

Printed per fault: spells committed, rows, lost, duplicate rows, duplicate and missing toasts,
undelivered toasts, reopened facts, spells parked, the most calls the stub saw in any window
of the quota (against the quota; `in log`: the most in the quota's own log, in its window and
margin), the share of the quota used while calls waited, the
recovery time — from the last fault to the last burst read (for chaos/twice/garbled/quota:
the whole run) — and, the figure a human feels, the last toast: from the last fault to the
last toast delivered (for the store's outages: from the end of the outage, and `held s`: to
the last toast of the lines said before the store was back, apart from what was said after) —
and the workers' tracebacks and ERROR lines (a store's pause is not a failure, and must not
log as one). A watcher reads the outbox every 50 ms for when each toast appeared and when it
was delivered; `toast p99` is the 99th percentile of that delay over the run.

Every setting is the shipped default (the sweep, its lag, the in-flight claim: what the
Procfile's beat runs), so the last toast shows the recovery promise (`rooms.recovery_bound_s`
plus the chains' own time: 120 s). `--fast-sweep` runs the sweep every second (grace and
lag 3 s, a 10 s claim) for a quick look. The tests (tests/ops/test_faults.py) run the same
harness small and assert what holds at any speed: the zeros, the quota's own log in Redis
(`gate calls`, the most in its window: `ratelimit.sent_log`) and the order of events. The
timings — the last toast, the calls' arrivals at the stub — are this benchmark's alone: they
move with how busy the machine is.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from sqlalchemy import Engine, func, make_url, select  # noqa: E402

from memory_worker import app_side  # noqa: E402
from memory_worker.core import settings as settings_mod  # noqa: E402
from memory_worker.core import tables as t  # noqa: E402
from memory_worker.core.constants import QUEUES  # noqa: E402
from memory_worker.core.settings import EMBEDDED, Settings  # noqa: E402
from memory_worker.models.scripted import candidate, transcript_ids  # noqa: E402
from memory_worker.ops import embedded, local_worker, ratelimit, runner  # noqa: E402
from memory_worker.ops.ratelimit import Quota  # noqa: E402
from memory_worker.storage import store  # noqa: E402
from memory_worker.storage.outage import is_store_outage  # noqa: E402
from memory_worker.tasks.rooms import recovery_bound_s  # noqa: E402
from memory_worker.testing import private_postgres  # noqa: E402
from memory_worker.testing.gemini_stub import (  # noqa: E402
    Fault,
    GeminiStub,
    gemini_responder,
)

T = TypeVar("T")

FACTS = {  # a line's words → the fact it states (u:N added in front)
    "I keep bees on the roof.": "keeps bees on the roof.",
    "I play cello in an orchestra.": "plays cello in an orchestra.",
    "I collect vintage train tickets.": "collects vintage train tickets.",
    "I study marine geology at night.": "studies marine geology at night.",
    "I no longer keep bees.": "no longer keeps bees.",
    "I bake sourdough every sunday.": "bakes sourdough every sunday.",
}
BURSTS = [
    ["I keep bees on the roof.", "I play cello in an orchestra."],
    ["I collect vintage train tickets.", "I study marine geology at night."],
    ["I no longer keep bees.", "I bake sourdough every sunday."],
]
OPEN_FACTS = [
    "plays cello in an orchestra.",
    "collects vintage train tickets.",
    "studies marine geology at night.",
    "bakes sourdough every sunday.",
]
CLOSED_FACT = "keeps bees on the roof."
FAULTS = (
    "kill",
    "wipe",
    "restart",
    "chaos",
    "twice",
    "garbled",
    "quota",
    "coldstart",
    "pgdown5",
    "pgdown30",
    "sqlitelock",
    "diskfull",
    "brokerfull",
    "none",
)
# The store away: how long, and how far into the run (the bursts' chains in flight).
STORE_OUTAGE_S = {"pgdown5": 5.0, "pgdown30": 30.0, "sqlitelock": 30.0, "diskfull": 45.0}
BROKER_FULL_S = 45.0  # the "brokerfull" fault's length
PAGE_CAP = ROOT / "benchmarks" / "page_cap"  # the workers' hook for "diskfull" (sitecustomize)
STORE_OUTAGE_AFTER_S = 1.0
STORE_POLL_S = 0.1  # the app (the talkers) and the watcher try the store again this often
QUOTA_RPM = 120.0  # the "quota" fault: 2 calls a second for every room at once
COLDSTART_RPM = 300.0  # "coldstart": 5 calls a second, three workers of 8 threads at once
GARBLED = json.dumps(  # every item ill-typed: a malformed answer, not an empty one
    {"candidates": [{"subject": 5000, "kind": "fact", "text": ["x"], "importance": "high"}] * 2}
)
BURST_TIMEOUT_S = 180.0  # past the recovery promise (120 s): a burst not read is a finding
FAST_SWEEP: dict[str, Any] = {
    "sweep_every_s": 1.0,
    "sweep_grace_s": 3.0,
    "sweep_lag_s": 3.0,
    "inflight_ttl_s": 10,
}
WATCH_EVERY_S = 0.05  # how often the toast watcher reads the outbox
SETTLE_S = 240.0  # after the last fault, a toast not delivered yet is counted undelivered
SWEEP_SETTINGS = ("sweep_every_s", "sweep_grace_s", "sweep_lag_s", "inflight_ttl_s")
_LINE = re.compile(r"^\[(\d+)\] (u:\d+): (.*)$", re.M)


def extract(prompt: str) -> dict:
    """What a careful extractor finds: one candidate per line that states a fact."""
    found = []
    wanted = set(transcript_ids(prompt))
    for m in _LINE.finditer(prompt):
        line_id, speaker, text = int(m.group(1)), m.group(2), m.group(3).strip()
        fact = FACTS.get(text)
        if fact and line_id in wanted:
            found.append(candidate(speaker, "fact", f"{speaker} {fact}", 6, [line_id]))
    return {"candidates": found}


def chaos(share: float, seed: int = 7):  # type: ignore[no-untyped-def]
    """A stub hook failing `share` of calls: 429 with a retryDelay, 500, a hang, malformed."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def pick(kind: str) -> Fault | None:
        with lock:
            if rng.random() >= share:
                return None
            what = rng.choice(["429", "500", "hang", "malformed"])
        if what == "429":
            return Fault(kind=kind, status=429, retry_delay="1s")
        if what == "500":
            return Fault(kind=kind, status=500)
        if what == "hang":
            return Fault(kind=kind, hang_seconds=2.5)  # the client gives up after 1 s
        if kind == "chat":
            return Fault(kind=kind, text='{"candidates": "not a list"}')
        return Fault(kind=kind, status=503)

    return pick


def garbled(share: float, seed: int = 7):  # type: ignore[no-untyped-def]
    """A stub hook answering `share` of chat calls with JSON none of whose items is valid."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def pick(kind: str) -> Fault | None:
        with lock:
            hit = kind == "chat" and rng.random() < share
        return Fault(kind=kind, text=GARBLED) if hit else None

    return pick


@dataclass
class Figures:
    fault: str
    rooms: int
    spells_committed: int = 0
    rows: int = 0
    lost: int = 0
    duplicate_rows: int = 0
    duplicate_toasts: int = 0
    missing_toasts: int = 0
    undelivered_toasts: int = 0
    reopened: int = 0
    parked: int = 0
    parked_for_quota: int = 0
    stub_most_in_window: int = 0  # calls the stub saw in any sliding window of the quota
    quota_per_window: int = 0
    stub_calls: int = 0  # requests the stub saw
    # The quota's own record (`ratelimit.sent_log`, on Redis's clock): the calls its gate let
    # go, and the most of them in any window + margin. Unlike the stub's figure it holds at any
    # speed: the tests assert it, the benchmark prints the stub's.
    gate_calls: int = 0
    gate_most_in_window: int = 0
    quota_used: float = 0.0  # calls / what the quota allowed, first call to last
    faults_injected: int = 0
    recovery_s: float = 0.0
    last_toast_s: float = 0.0  # the last toast delivered, after the last fault (or the start)
    toast_p50_s: float = 0.0  # a toast's delay from appearing in the outbox to delivered
    toast_p99_s: float = 0.0
    toast_max_s: float = 0.0
    recovery_bound_s: float = 0.0  # what the sweep settings promise, before the chains' time
    held_toast_s: float = 0.0  # store outages: the last toast of lines said before it was back
    tracebacks: int = 0  # in the workers' logs
    errors_logged: int = 0  # ERROR lines in the workers' logs
    model_calls: int = 0  # requests the stub answered (a "none" run's, for the same workload)
    worker_exits: int = 0  # workers that exited by themselves during the run
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.duplicate_rows
            or self.duplicate_toasts
            or self.missing_toasts
            or self.undelivered_toasts
            or self.reopened
        )


class ToastWatch:
    """Reads the outbox every WATCH_EVERY_S: when each toast appeared, when it was delivered
    (monotonic seconds, as the faults' own clock)."""

    def __init__(self, eng: Engine):
        self.eng = eng
        self.seen: dict[int, float] = {}
        self.delivered: dict[int, float] = {}
        self.last_line: dict[int, int] = {}  # a toast's spell's last line
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toast-watch", daemon=True)

    def __enter__(self) -> ToastWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.read()

    def _run(self) -> None:
        while not self._done.wait(WATCH_EVERY_S):
            away(self.read)

    def read(self) -> None:
        n = t.notices.c
        with self.eng.connect() as conn:
            rows = conn.execute(select(n.id, n.delivered, n.spell_key)).all()
        now = time.monotonic()
        for notice_id, delivered, spell_key in rows:
            self.seen.setdefault(notice_id, now)
            self.last_line[notice_id] = int(spell_key.rsplit("/", 1)[-1])
            if delivered:
                self.delivered.setdefault(notice_id, now)

    def undelivered(self) -> int:
        return len(self.seen) - len(self.delivered)

    def held(self, since: float, upto: int) -> float:
        """From `since` to the last delivery of a toast whose lines were all said by line
        `upto`: what the outage held up, apart from what was said after it."""
        held = [at for i, at in self.delivered.items() if self.last_line[i] <= upto]
        return round(max(0.0, max(held) - since), 2) if held else 0.0

    def figures(self, since: float, fig: Figures) -> None:
        if not self.delivered:
            return
        fig.last_toast_s = round(max(0.0, max(self.delivered.values()) - since), 2)
        delays = sorted(at - self.seen[i] for i, at in self.delivered.items())
        fig.toast_p50_s = round(delays[len(delays) // 2], 2)
        fig.toast_p99_s = round(delays[min(len(delays) - 1, int(len(delays) * 0.99))], 2)
        fig.toast_max_s = round(delays[-1], 2)


WorkerShape = tuple[tuple[str, ...], str, int]  # queues, pool, concurrency


def procfile_workers() -> list[WorkerShape]:
    """The Procfile's worker lines (`model`, `commit`, `events`) as `memory-worker run` starts
    them: each line's queues, pool and concurrency, read from the Procfile itself."""
    shapes = []
    for line in runner.parse_procfile(ROOT / "Procfile"):
        queues = re.search(r" -Q (\S+)", line.command)
        pool = re.search(r"pools\.(\w+):", line.command)
        threads = re.search(r"--concurrency (\d+)", line.command)
        if " worker " in line.command and queues and pool and threads:
            shapes.append((tuple(queues.group(1).split(",")), pool.group(1), int(threads.group(1))))
    return shapes


class Stack:
    """Workers and a beat on one broker and one store. `procfile`: the Procfile's three workers
    at its concurrency (model and embed on 32 threads, the commit solo, events on 4) — what a
    deployer runs, and what the store's outages are measured under; else `workers` alike, each
    on every queue with `concurrency` threads (a small stack that a kill fault can hit often)."""

    def __init__(
        self,
        settings: Settings,
        workdir: Path,
        workers: int = 2,
        concurrency: int = 2,
        *,
        procfile: bool = False,
        env: dict[str, str] | None = None,
    ):
        self.settings = settings
        self.env = env or {}
        self.workdir = workdir
        self.shapes: list[WorkerShape] = (
            procfile_workers() if procfile else [(QUEUES, "threads", concurrency)] * workers
        )
        self.procfile = procfile
        self.workers: list[subprocess.Popen | None] = [None] * len(self.shapes)
        self.beat: subprocess.Popen | None = None
        self.starts = 0

    def start_worker(self, i: int) -> None:
        self.starts += 1  # each start its own log: what a worker said before it was killed
        log = self.workdir / f"worker{i}-{self.starts}.log"
        queues, pool, concurrency = self.shapes[i]
        self.workers[i] = local_worker.start(
            self.settings,
            queues=queues,
            pool=pool,
            concurrency=concurrency,
            name=f"fault{i}",
            log=log,
            loglevel="INFO",
            procfile_pool=self.procfile,
            env_extra=self.env,
        )

    def logged(self, *marks: str) -> list[str]:
        """The workers' log lines holding any of `marks` (CRITICAL, ERROR...)."""
        return [
            line
            for log in sorted(self.workdir.glob("worker*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if any(m in line for m in marks)
        ]

    def start(self) -> None:
        for i in range(len(self.workers)):
            self.start_worker(i)
        env = {
            **os.environ,
            **self.settings.as_env(),
            "PYTHONWARNINGS": f"ignore:{local_worker.ROOT_WARNING}",  # by message: see local_worker
        }
        self.beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "--quiet", "-A", "memory_worker.tasks.celery_app",
             "beat", "--loglevel", "WARNING",
             "--schedule", str(self.workdir / "beat-schedule")],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def kill_one(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.workers))
        proc = self.workers[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.start_worker(i)

    def exited(self) -> int:
        """Workers that exited by themselves (a kill fault's victims are started again)."""
        return sum(1 for proc in self.workers if proc is not None and proc.poll() is not None)

    def stop(self) -> None:
        for proc in [*self.workers, self.beat]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)  # what is left must not matter
                proc.wait()


def seed(eng: Engine, rooms: int) -> list[tuple[str, int]]:
    out = []
    with eng.begin() as conn:
        app_side.add_persona(conn, "warren", "Warren")
        for r in range(rooms):
            human, room = 5000 + r, f"f-{r}"
            app_side.add_user(conn, human, f"Human {r}")
            app_side.add_room(conn, room, "private", [f"u:{human}", "warren"])
            out.append((room, human))
    return out


def cursor(eng: Engine, room: str) -> int:
    with eng.connect() as conn:
        got = conn.execute(
            select(t.cursors.c.last_line_id).where(
                t.cursors.c.persona == "warren", t.cursors.c.room_id == room
            )
        ).scalar()
    return int(got or 0)


def talk(
    eng: Engine,
    url: str,
    room: str,
    human: int,
    twice: bool,
    errors: list[str],
    said_first: int | None = None,
) -> None:
    """The room's three bursts, each waited for (its cursor reaching the burst's last line).
    `said_first`: the first burst is said and its quiet event sent already (its last line)."""
    for i, burst in enumerate(BURSTS):
        if i == 0 and said_first is not None:
            last = said_first
        else:
            last = patiently(functools.partial(say, eng, room, human, burst))
            for _ in range(2 if twice else 1):
                room_quiet(url, room)
        deadline = time.monotonic() + BURST_TIMEOUT_S
        while (away(lambda: cursor(eng, room)) or 0) < last:
            if time.monotonic() > deadline:
                errors.append(f"{room}: burst ending {last} not read in {BURST_TIMEOUT_S}s")
                return
            time.sleep(0.05)


def away(read: Callable[[], T]) -> T | None:
    """`read()`, or None while the store is away (the watcher, a talker's look at a cursor)."""
    try:
        return read()
    except Exception as e:
        if not is_store_outage(e):
            raise
        return None


def patiently(write: Callable[[], T]) -> T:
    """`write()`, tried again until the store is back: the app's own lines wait for it."""
    while True:
        try:
            return write()
        except Exception as e:
            if not is_store_outage(e):
                raise
            time.sleep(STORE_POLL_S)


def last_line(eng: Engine) -> int:
    with eng.connect() as conn:
        return int(conn.execute(select(func.max(t.lines.c.id))).scalar() or 0)


def say(eng: Engine, room: str, human: int, burst: list[str]) -> int:
    with eng.begin() as conn:
        return [app_side.say(conn, room, human, text) for text in burst][-1]


def room_quiet(url: str, room: str) -> None:
    """What `events.room_quiet` sends, on this run's broker. With the broker away it fails as
    the app's call would, and the sweep (the cursors are the truth) picks the room up."""
    from memory_worker.tasks.celery_app import app
    from memory_worker.tasks.rooms import on_room_quiet

    try:
        with app.connection_for_write(url) as conn:
            on_room_quiet.apply_async((room,), connection=conn)
    except Exception:  # noqa: BLE001 - a broker fault at the app: the sweep covers it
        pass


def wipe(client: redis.Redis, claims: bool = False) -> None:
    """Every queued, unacked and scheduled message of ours gone (FLUSHDB, minus the keys of
    anyone else who shares this database); with `claims`, the spells' in-flight claims and
    the quota's windows too."""
    ours = ("unacked", "_kombu", "mw:") if claims else ("unacked", "_kombu")
    for key in client.scan_iter():
        name = key.decode()
        if name in QUEUES or name.startswith(ours):
            client.delete(key)


def wait_ready(url: str, timeout: float = 90.0) -> None:
    """Until both workers answer a ping on this run's broker (an app of its own: the
    process's app may be bound to another broker, as in the test session)."""
    from celery import Celery

    probe = Celery("probe", broker=url)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(probe.control.ping(timeout=0.5)) >= 2:
                return
    finally:
        probe.close()
    raise RuntimeError(f"the workers did not answer within {timeout}s")


def check(eng: Engine, rooms: list[tuple[str, int]], fig: Figures) -> None:
    with eng.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(t.persona_memory)).mappings()]
        notes = [dict(r) for r in conn.execute(select(t.notices)).mappings()]
        spells = [dict(r) for r in conn.execute(select(t.spells)).mappings()]
    fig.rows = len(rows)
    fig.spells_committed = sum(1 for s in spells if s["status"] == "committed")
    by_text = Counter(r["text"] for r in rows)
    for _, human in rooms:
        for fact in OPEN_FACTS:
            text = f"u:{human} {fact}"
            fig.lost += by_text[text] == 0
            fig.duplicate_rows += max(0, by_text[text] - 1)
        bees = [r for r in rows if r["text"] == f"u:{human} {CLOSED_FACT}"]
        fig.lost += not bees
        fig.duplicate_rows += max(0, len(bees) - 1)
        fig.reopened += sum(1 for r in bees if r["valid_to"] is None)
    noted = Counter(i for n in notes for i in json.loads(n["row_ids"]))
    fig.duplicate_toasts = sum(c - 1 for c in noted.values() if c > 1)
    fig.missing_toasts = sum(1 for r in rows if noted[r["id"]] == 0)
    fig.undelivered_toasts = sum(1 for n in notes if not n["delivered"])
    fig.parked = sum(1 for s in spells if s["status"] == "parked")
    fig.parked_for_quota = sum(
        1 for s in spells if s["status"] == "parked" and "quota" in (s["reason"] or "")
    )


def at_the_stub(stub: GeminiStub, quota: Quota, fig: Figures) -> None:
    """The quota where the model counts it: the most requests in any sliding window, and how
    much of the quota the run used between its first and last call."""
    times = sorted(r.at for r in stub.requests)
    best = ratelimit.most_in_any_window(times, quota.window_s)
    fig.stub_most_in_window, fig.quota_per_window = best, quota.requests
    fig.stub_calls = len(times)
    if len(times) > 1:
        allowed = (times[-1] - times[0]) * quota.requests / quota.window_s
        fig.quota_used = round((len(times) - 1) / allowed, 3)


def in_the_gate_log(client: redis.Redis, quota: Quota, fig: Figures) -> None:
    """The quota where it is kept: every call its gate let go this run, and the most of them
    in any window + margin (what the gate holds to, whatever the machine's speed)."""
    from memory_worker.models.limited import QUOTA_NAME

    try:
        sent = ratelimit.sent_log(client, QUOTA_NAME)
    except redis.RedisError:  # the broker away at the very end (restart): the stub's figure
        return
    fig.gate_calls = len(sent)
    window_ms = (quota.window_s + quota.margin_s) * 1000
    fig.gate_most_in_window = ratelimit.most_in_any_window(sent, window_ms)


def run(
    fault: str,
    *,
    rooms: int = 6,
    redis_url: str | None = None,
    database_url: str | None = None,
    seed_: int = 1,
    overrides: dict[str, Any] | None = None,
    quota_margin_s: float | None = None,
    logs: Path | None = None,
    outage_s: float | None = None,
) -> Figures:
    """One run of the workload under `fault`; returns its figures (invariants and timings).

    Every setting of the sweep and the in-flight claim is the shipped default unless
    `overrides` changes it (FAST_SWEEP; the tests scale them down). With the embedded Redis the
    workers and beat use it as a deployment does (MW_BROKER_URL unset), so the `restart` fault
    is met by nothing but the workers themselves: no supervisor starts it again. `outage_s`:
    the store's outage for pgdown/sqlitelock (default: their own, STORE_OUTAGE_S)."""
    rng = random.Random(seed_)
    fig = Figures(fault, rooms)
    pg = private_postgres.PrivatePostgres() if fault.startswith("pgdown") else None
    with tempfile.TemporaryDirectory() as tmp, GeminiStub() as stub, _removed(pg):
        work = Path(tmp)
        state = work / "redis"
        url = redis_url or embedded.ensure_running(state)
        db_url = pg.start().url if pg else database_url or f"sqlite:///{work / 'faults.db'}"
        if fault in ("sqlitelock", "diskfull") and not db_url.startswith("sqlite"):
            raise ValueError(f"{fault} needs the SQLite store (no --database)")
        cap = work / "page-cap"  # "diskfull": the workers' page cap (benchmarks/page_cap)
        if db_url.startswith("postgresql"):
            eng = store.engine(db_url)
            with eng.begin() as conn:
                t.metadata.drop_all(conn)
                conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        store.init_db(db_url)
        eng = store.engine(db_url)
        stub.chat_responder = gemini_responder(extract)
        if fault == "chaos":
            stub.chaos = chaos(1 / 3, seed_)
        elif fault == "garbled":
            stub.chaos = garbled(1 / 3, seed_)
        elif fault in ("wipe", "restart", "brokerfull", *STORE_OUTAGE_S):  # a backlog waits
            stub.chaos = lambda kind: Fault(kind=kind, hang_seconds=0.3)
        defaults = Settings.from_env({})
        s = stub.settings(
            settings_mod.current().with_(
                database_url=db_url,
                broker_url=redis_url or EMBEDDED,
                state_dir=state,
                retry_backoff_base_s=0.2,
                model_timeout_ms=1_000,
                model_requests_per_minute={"quota": QUOTA_RPM, "coldstart": COLDSTART_RPM}.get(
                    fault, 60_000
                ),
                today=None,
                **{name: getattr(defaults, name) for name in SWEEP_SETTINGS},
            )
        ).with_(**(overrides or {}))
        if quota_margin_s is not None:
            s = s.with_(model_quota_margin_s=quota_margin_s)
        fig.recovery_bound_s = recovery_bound_s(s)
        quota = Quota.per_minute(
            s.model_requests_per_minute, s.model_tokens_per_minute, s.model_quota_margin_s
        )
        broker = redis.Redis.from_url(url)
        # A run starts from an empty broker: a message an earlier run left unacked on this
        # database would come back to these workers, its spell read from another store.
        wipe(broker, claims=True)
        placed = seed(eng, rooms)
        cold = fault == "coldstart"
        first: dict[str, int] = {}
        if cold:  # the backlog is there before any worker is
            for room, human in placed:
                first[room] = say(eng, room, human, BURSTS[0])
                room_quiet(url, room)
        stack = Stack(
            s,
            work,
            workers=3 if cold else 2,
            concurrency=8 if cold else 2,
            # A deployer's outage, under the Procfile's workers.
            procfile=fault in (*STORE_OUTAGE_S, "brokerfull", "none"),
            env={"PYTHONPATH": os.pathsep.join([str(PAGE_CAP), os.environ.get("PYTHONPATH", "")]),
                 "FAULTS_PAGE_CAP": str(cap)} if fault == "diskfull" else None,
        )  # fmt: skip
        stack.start()
        errors: list[str] = []
        last_fault = [time.monotonic()]
        said_by = [0]  # the last line said when the store came back
        done = threading.Event()

        def kill_redis() -> None:
            """SIGKILL the embedded Redis; nobody here starts it again (the workers do)."""
            os.kill(int((state / "redis.pid").read_text()), signal.SIGKILL)

        def inject() -> None:
            if fault == "kill":
                while not done.wait(rng.uniform(0.3, 1.0)):
                    stack.kill_one(rng)
                    fig.faults_injected += 1
                    last_fault[0] = time.monotonic()
                    if fig.faults_injected >= 12:
                        return
            elif fault == "restart":
                if redis_url is not None:
                    raise ValueError("restart needs the embedded Redis (no --redis)")
                if not done.wait(0.5):
                    kill_redis()
                    fig.faults_injected += 1
                    last_fault[0] = time.monotonic()
            elif fault == "wipe":
                for _ in range(12):  # every 0.15 s: whatever is queued between steps is lost
                    if done.wait(0.15):
                        return
                    wipe(broker)
                    fig.faults_injected += 1
                    last_fault[0] = time.monotonic()
            elif fault == "brokerfull":
                if done.wait(STORE_OUTAGE_AFTER_S):
                    return
                with broker_full(broker):
                    fig.faults_injected += 1
                    time.sleep(outage_s or BROKER_FULL_S)
                last_fault[0] = time.monotonic()  # memory is back
            elif fault in STORE_OUTAGE_S:  # the chains in flight when it goes
                if done.wait(STORE_OUTAGE_AFTER_S):
                    return
                with store_away(pg, db_url, cap if fault == "diskfull" else None):
                    fig.faults_injected += 1
                    time.sleep(outage_s or STORE_OUTAGE_S[fault])  # the fault's length
                last_fault[0] = time.monotonic()  # the store is back
                said_by[0] = patiently(functools.partial(last_line, eng))

        try:
            wait_ready(url)
            started = time.monotonic()
            with ToastWatch(eng) as watch:
                faults = threading.Thread(target=inject, daemon=True)
                faults.start()
                talkers = [
                    threading.Thread(
                        target=talk,
                        args=(eng, url, room, human, fault == "twice", errors, first.get(room)),
                    )
                    for room, human in placed
                ]
                for th in talkers:
                    th.start()
                for th in talkers:
                    th.join()
                finished = time.monotonic()
                done.set()
                faults.join()
                timed = ("kill", "wipe", "restart", "brokerfull", *STORE_OUTAGE_S)
                since = last_fault[0] if fault in timed else started
                _settle(watch, since + SETTLE_S)
            fig.elapsed_s = round(finished - started, 2)
            at_the_stub(stub, quota, fig)
            in_the_gate_log(broker, quota, fig)
            fig.recovery_s = round(max(0.0, finished - since), 2)  # the last burst read
            watch.figures(since, fig)
            if fault in STORE_OUTAGE_S:
                fig.held_toast_s = watch.held(since, said_by[0])
            fig.notes = errors + stack.logged("CRITICAL", "Unrecoverable")
            fig.tracebacks = len(stack.logged("Traceback (most recent call last)"))
            fig.errors_logged = len(stack.logged("ERROR/", "CRITICAL/"))
            fig.model_calls = len(stub.requests)
            fig.worker_exits = stack.exited()
        finally:
            stack.stop()
            if redis_url is None:
                embedded.stop(state)
            if logs is not None:  # what an operator would read: each worker's log
                logs.mkdir(parents=True, exist_ok=True)
                for log in work.glob("worker*.log"):
                    shutil.copy(log, logs / f"{fault}-{log.name}")
        check(eng, placed, fig)
        if not database_url or pg:
            eng.dispose()
    return fig


@contextmanager
def _removed(pg: private_postgres.PrivatePostgres | None) -> Iterator[None]:
    """The run's private PostgreSQL (if any) removed at the end, whatever happened."""
    try:
        yield
    finally:
        if pg is not None:
            store.dispose_all()
            pg.remove()


@contextmanager
def broker_full(client: redis.Redis) -> Iterator[None]:
    """The broker full while inside: maxmemory set to half what Redis uses now, with
    noeviction (what a Celery broker runs), so every write that could grow it is refused all
    along — the acks that free a little never bring it under — while reads and deletions go
    on; set back after."""
    before = client.config_get("maxmemory*")
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    try:
        yield
    finally:
        client.config_set("maxmemory", before["maxmemory"])
        client.config_set("maxmemory-policy", before["maxmemory-policy"])


@contextmanager
def store_away(
    pg: private_postgres.PrivatePostgres | None, db_url: str, cap: Path | None = None
) -> Iterator[None]:
    """The store away while inside: the private PostgreSQL stopped abruptly (started again
    after), the SQLite file locked by another process (`BEGIN EXCLUSIVE`, rolled back
    after), or — with `cap`, the workers' page cap file — the SQLite store full (its size
    now its cap, lifted after)."""
    if cap is not None:
        cap.write_text("1")
        try:
            with _page_capped(cap):  # the app's own writes too: the disk is full for all
                yield
        finally:
            cap.write_text("0")
        return
    if pg is not None:
        pg.stop()
        try:
            yield
        finally:
            pg.start()
        return
    path = make_url(db_url).database
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # the holder rolls back and exits
        holder.wait()


def _page_capped(cap: Path) -> Any:
    """benchmarks/page_cap's hook in this process (the workers load it at start)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("page_cap", PAGE_CAP / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.capped(str(cap))


# Another process holding the SQLite file's write lock until its stdin closes.
_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def _settle(watch: ToastWatch, deadline: float) -> None:
    """Until every toast is delivered (by its commit, the room's next one or the sweep), or
    the deadline: an undelivered toast is then counted, not waited for. Each look reads the
    outbox afresh: a toast committed with the last burst's cursor may be younger than the
    watcher's last read, and is not delivered yet."""
    while True:
        watch.read()
        if not watch.undelivered() or time.monotonic() >= deadline:
            return
        time.sleep(WATCH_EVERY_S)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rooms", type=int, default=12)
    p.add_argument("--redis", help="a Redis URL (default: a private embedded one)")
    p.add_argument("--database", help="a store URL (default: a SQLite file)")
    p.add_argument("--faults", nargs="*", default=None, choices=FAULTS)
    p.add_argument("--json", type=Path, help="also write the figures here (benchmarks.report)")
    p.add_argument(
        "--fast-sweep", action="store_true", help="sweep every 1 s (grace, lag 3 s; 10 s claim)"
    )
    p.add_argument("--logs", type=Path, help="keep each worker's log (INFO) in this folder")
    a = p.parse_args()
    if a.faults is None:  # restart needs the embedded Redis; pgdown a PostgreSQL of its own
        a.faults = [
            f
            for f in FAULTS
            if not (f == "restart" and a.redis)
            and not (f.startswith("pgdown") and not private_postgres.available())
            and not (f in ("sqlitelock", "diskfull") and a.database)
        ]
    overrides = FAST_SWEEP if a.fast_sweep else {}
    started_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = round(os.getloadavg()[0], 1)
    sweep = ", ".join(f"{k} {v:g}" for k, v in overrides.items()) or "the default settings"
    print(
        f"{a.rooms} rooms × 3 spells, 2 workers + beat (the store's outages: the Procfile's "
        f"workers; {sweep})"
    )
    head = (
        f"{'fault':<8}{'spells':>7}{'rows':>6}{'lost':>6}{'dup rows':>9}{'dup toasts':>11}"
        f"{'missing':>8}{'undeliv':>8}{'reopen':>7}{'parked':>7}{'quota':>6}{'at stub':>8}"
        f"{'in log':>7}"
        f"{'used':>6}{'faults':>7}{'recovery s':>11}{'last toast s':>13}{'toast p99':>10}"
        f"{'total s':>8}{'held s':>7}{'tracebacks':>11}{'errors':>7}{'calls':>6}{'exits':>6}"
    )
    print(head)
    figures = []
    for fault in a.faults:
        before = os.getloadavg()[0]
        f = run(
            fault,
            rooms=a.rooms,
            redis_url=a.redis,
            database_url=a.database,
            overrides=overrides,
            logs=a.logs,
        )
        # The load average at the fault's start and end (the machine's, not only this run's).
        runs_load = [round(before, 1), round(os.getloadavg()[0], 1)]
        figures.append({**asdict(f), "clean": f.clean, "load": runs_load})
        print(
            f"{f.fault:<8}{f.spells_committed:>7}{f.rows:>6}{f.lost:>6}{f.duplicate_rows:>9}"
            f"{f.duplicate_toasts:>11}{f.missing_toasts:>8}{f.undelivered_toasts:>8}"
            f"{f.reopened:>7}{f.parked:>7}{f.parked_for_quota:>6}"
            f"{f'{f.stub_most_in_window}/{f.quota_per_window}':>8}"
            f"{f'{f.gate_most_in_window}/{f.quota_per_window}':>7}{f.quota_used:>6.2f}"
            f"{f.faults_injected:>7}{f.recovery_s:>11.1f}{f.last_toast_s:>13.1f}"
            f"{f.toast_p99_s:>10.2f}{f.elapsed_s:>8.1f}{f.held_toast_s:>7.1f}"
            f"{f.tracebacks:>11}{f.errors_logged:>7}{f.model_calls:>6}{f.worker_exits:>6}",
            flush=True,
        )
        for note in f.notes:
            print(f"        {note}")
    if a.json:
        settings = {
            "overrides": overrides,
            "recovery_bound_s": figures[0]["recovery_bound_s"],
            "when": started_at,
            "load": load,
        }
        a.json.write_text(json.dumps({"rooms": a.rooms, **settings, "results": figures}, indent=1))


if __name__ == "__main__":
    main()
