"""`memory-worker run`: the Procfile's processes, supervised, with a clean stop.

Why not a generic Procfile runner: honcho stops every process when one exits (a Flower
without credentials would take the workers down) and kills after 5 s, stranding any model
call in flight. Here:

* the state folder exists before anything starts, and the settings are checked first; a
  second run in the same state folder is refused (its supervisor's pid is in
  `supervisor.pid`), before it starts anything: two sets of workers, one Flower port;
* each process runs in its own process group; one that exits is started again with a
  backoff (tenacity's), the others carry on — and one that keeps dying at start stops the
  whole run, with its last line as the reason: half a system (beat and Flower running, the
  workers down) looks up and does nothing;
* Flower gets its credentials from the state folder when the environment has none
  (`ops.flower`: made and printed the first time), so it is up at once;
* with the embedded broker, the supervisor starts it and starts it again on the same address
  if it dies (`embedded.ensure_running`), so the workers' reconnect loops find it;
* a worker that is up but answers no Celery ping (over the broker, by its `--hostname`) for
  LIVENESS_MISSES checks in a row, MW_LIVENESS_EVERY_S apart, while the broker answers, is
  killed and started again: a worker that cannot consume is not alive (one stayed
  up after "Unrecoverable error" on a broker loss and consumed nothing until restarted). A
  full broker refuses the replies, so nobody is judged while it is full;
* SIGTERM/SIGINT stop everything: SIGTERM to every group (Celery's soft shutdown: no new
  work; a model call in flight ends by its own HTTP timeout and its task retries through the
  broker), SIGKILL only after `stop_timeout()` = soft shutdown + model timeout + a margin.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from tenacity import RetryCallState, wait_exponential

from memory_worker.core import settings as settings_mod
from memory_worker.core.settings import EMBEDDED
from memory_worker.ops import broker, embedded, flower
from memory_worker.ops.local_worker import ROOT_WARNING

STOP_MARGIN_S = 10.0  # after the soft shutdown and a model call's own timeout
CRASH_LOOP_S = 10.0  # a process that dies this soon after starting...
CRASH_LOOP_MAX = 5  # ...this many times in a row stops the run
LIVENESS_MISSES = 3  # pings in a row unanswered, the broker up, before a worker is restarted
_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
_HOSTNAME = re.compile(r"--hostname[= ]+(\S+)")
RESTART_WAIT_MAX_S = 30.0  # the longest wait before a process that exited is started again


@dataclass
class Process:
    name: str
    command: str
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_deaths: int = 0
    next_start: float = 0.0
    log_threads: list[threading.Thread] = field(default_factory=list)
    last_line: str = ""  # what it printed last: the reason a crash loop is stopped with
    misses: int = 0  # liveness pings unanswered in a row, since it first answered one
    answered: bool = False  # since its last start: a worker still booting is not judged

    @property
    def is_worker(self) -> bool:
        """A Celery worker: it reads and writes the store (beat and Flower do not)."""
        return " worker " in f" {self.command} "

    @property
    def node(self) -> str | None:
        """The Celery node name this line's worker answers pings as, or None (not a worker,
        or no --hostname to address it by)."""
        found = _HOSTNAME.search(self.command)
        if not self.is_worker or found is None:
            return None
        return found.group(1).strip("'\"").replace("%h", socket.gethostname())


def parse_procfile(path: Path) -> list[Process]:
    out = []
    for raw in path.read_text().splitlines():
        m = _LINE.match(raw.strip())
        if m and not raw.lstrip().startswith("#"):
            out.append(Process(m.group(1), m.group(2)))
    return out


def _write(text: str) -> None:
    """To our stdout; a closed terminal or pipe must never stop the supervisor mid-stop."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


# What a Celery worker prints on the stop the supervisor itself asked for: SIGTERM, remapped
# to Celery's cold shutdown, which begins with the soft shutdown (the Procfile). "Cold" and
# "Hitting Ctrl+C again" describe a person at a worker's own terminal, not this stop, which
# the supervisor says once in its own words. Dropped only while it stops.
_STOP_CHATTER = frozenset(
    {
        "",
        "worker: Hitting Ctrl+C again will terminate all running tasks!",
        "worker: Cold shutdown (MainProcess)",
        "worker: Warm shutdown (MainProcess)",
        "Waiting gracefully for cold shutdown to complete...",
    }
)


def _pump(p: Process, stream: IO[bytes], width: int, stopping: threading.Event) -> None:
    for line in iter(stream.readline, b""):
        text = line.decode("utf-8", "replace")
        if stopping.is_set() and text.strip() in _STOP_CHATTER:
            continue
        _write(f"{p.name:<{width}} | {text}")
        if text.strip():
            p.last_line = text.strip()


class Supervisor:
    def __init__(
        self,
        processes: list[Process],
        stop_timeout: float,
        restart_backoff_s: float,
        env: Mapping[str, str] | None = None,
    ):
        self.processes = processes
        self.stop_timeout = stop_timeout
        self.restart_wait = wait_exponential(multiplier=restart_backoff_s, max=RESTART_WAIT_MAX_S)
        self.width = max((len(p.name) for p in processes), default=4)
        self.stopping = threading.Event()
        self.failed: str | None = None  # why the run stops by itself: a crash loop
        self.broker_full = False  # said once per outage: nobody's liveness judged meanwhile
        # `celery` from the same environment as this supervisor, activated or not.
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            **(env or {}),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONWARNINGS": _without_root_warning(os.environ.get("PYTHONWARNINGS")),
        }

    def say(self, text: str) -> None:
        _write(f"{'run':<{self.width}} | {text}\n")

    def start(self, p: Process) -> None:
        p.proc = subprocess.Popen(
            ["/bin/sh", "-c", p.command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: a stop reaches its children too
            env=self.env,
        )
        p.started, p.misses, p.answered = time.monotonic(), 0, False
        args = (p, p.proc.stdout, self.width, self.stopping)
        t = threading.Thread(target=_pump, args=args, daemon=True)
        t.start()
        p.log_threads = [t]
        self.say(f"started {p.name} (pid {p.proc.pid})")

    def tend(self, p: Process) -> None:
        """Start again a process that exited, with a backoff; on a crash loop, say why and
        mark the run failed (`failed`): the caller stops everything."""
        if self.failed or p.proc is None or p.proc.poll() is None:
            return
        code = p.proc.returncode
        now = time.monotonic()
        if p.next_start == 0.0:
            lived = now - p.started
            p.quick_deaths = p.quick_deaths + 1 if lived < CRASH_LOOP_S else 0
            if p.quick_deaths >= CRASH_LOOP_MAX:
                for t in p.log_threads:  # its last words are the reason
                    t.join(timeout=1)
                said = f": {p.last_line}" if p.last_line else " (it printed nothing)"
                self.failed = (
                    f"{p.name} exited {code} {p.quick_deaths} times within "
                    f"{CRASH_LOOP_S:g}s of starting{said}"
                )
                return
            delay = self.restart_wait(cast(RetryCallState, _State(p.quick_deaths + 1)))
            p.next_start = now + delay
            self.say(f"{p.name} exited {code}; starting it again in {delay:.1f}s")
        if now >= p.next_start:
            p.next_start = 0.0
            self.start(p)

    def check_alive(self, broker_url: str) -> None:
        """Ping every running worker over the broker; restart one that stopped answering."""
        workers = [p for p in self.processes if p.node and p.proc and p.proc.poll() is None]
        if not workers:
            return
        from celery import Celery

        probe = Celery("liveness", broker=broker_url)
        try:
            probe.connection_for_read().ensure_connection(max_retries=1)
            full = broker.fullness(broker.client(broker_url))
        except Exception:  # the broker is away: not the workers' fault, nothing to judge
            probe.close()
            return
        if full:  # a full broker refuses the workers' replies: nothing to judge either
            probe.close()
            if not self.broker_full:
                self.say(f"the broker is {full}: no worker's liveness is judged until it has room")
            self.broker_full = True
            return
        self.broker_full = False
        try:
            for p in workers:
                try:
                    answered = probe.control.ping(destination=[str(p.node)], timeout=1.0)
                except Exception:  # the broker went away or filled up as we asked: next time
                    return
                if answered:
                    if not p.answered:
                        self.say(f"{p.name} answers pings as {p.node}")
                    p.answered, p.misses = True, 0
                elif p.answered:
                    p.misses += 1
                if p.misses >= LIVENESS_MISSES:
                    self.say(f"{p.name} answered no ping {p.misses} times: restarting it")
                    p.misses = 0
                    _signal_group(p, signal.SIGKILL)  # it consumes nothing: its messages
                    # are unacked and come back to the queue
        finally:
            probe.close()

    def stop(self) -> None:
        self.stopping.set()
        running = [p for p in self.processes if p.proc and p.proc.poll() is None]
        if running:
            self.say(
                f"stopping: no new work; running tasks finish or go back to the queue, "
                f"within {self.stop_timeout:g}s"
            )
        for p in running:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for p in running:
            assert p.proc is not None
            # The whole group, not only the shell: a worker may still be handing tasks back.
            while _group_alive(p) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _group_alive(p):
                self.say(f"{p.name} did not stop within {self.stop_timeout:g}s: killed")
                _signal_group(p, signal.SIGKILL)
            p.proc.wait()
        for p in self.processes:
            for t in p.log_threads:
                t.join(timeout=1)
        self.say("stopped")


def _is_a_run(pid: int) -> bool:
    """Whether `pid` is a `memory-worker run` (its marker may name a pid reused since its
    supervisor was killed: then this run is not refused)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"run" in argv and any(b"memory" in word for word in argv)


def _without_root_warning(given: str | None) -> str:
    """PYTHONWARNINGS for the processes: Celery's banner about running as root, printed by
    every worker at every start, left out (the supervisor says it once, `root_note`); any
    filter the deployer set kept. Matched by message, as in `local_worker`."""
    quiet = f"ignore:{ROOT_WARNING}"
    return f"{given},{quiet}" if given else quiet


def root_note(processes: list[Process]) -> str | None:
    """Once per run, as root with a worker to run: what Celery would have said per worker."""
    if os.geteuid() != 0 or not any(p.is_worker for p in processes):
        return None
    return (
        "warning: the workers run as root (uid 0); Celery advises a user of their own "
        "(the Procfile's commands under `su`/`setpriv`, or a container's USER)"
    )


@dataclass
class _State:  # what tenacity's wait strategies read
    attempt_number: int


def _group_alive(p: Process) -> bool:
    assert p.proc is not None
    p.proc.poll()  # reap the shell if it is done, so it does not count as alive
    try:
        os.killpg(p.proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(p: Process, sig: int) -> None:
    assert p.proc is not None
    try:
        os.killpg(p.proc.pid, sig)
    except ProcessLookupError:
        pass


def stop_timeout(s: settings_mod.Settings) -> float:
    """How long a stop waits before SIGKILL: the workers' soft shutdown, then a model call's
    own timeout (a thread inside an HTTP call cannot be interrupted), then a margin."""
    return s.worker_soft_shutdown_s + s.model_timeout_ms / 1000 + STOP_MARGIN_S


def run(procfile: Path, only: list[str] | None = None, stop_after: float | None = None) -> int:
    """Run the Procfile's processes (or `only` those) until SIGTERM/SIGINT: 0. A process
    that keeps dying at start stops them all: 1. Refused before anything starts, 2: no
    process to run, or a run already going in this state folder."""
    s = settings_mod.current()
    processes = [p for p in parse_procfile(procfile) if not only or p.name in only]
    if not processes:
        print(f"error: no processes to run in {procfile}", file=sys.stderr)
        return 2
    running = embedded.supervisor_pid(s.state_dir)
    if running is not None and _is_a_run(running):
        print(
            f"error: `memory-worker run` is already running here (pid {running}, in "
            f"{s.state_dir / embedded.SUPERVISOR_PID}): stop it first, or give this run "
            "another MW_STATE_DIR",
            file=sys.stderr,
        )
        return 2
    s.state_dir.mkdir(parents=True, exist_ok=True)
    started_broker = s.broker_url == EMBEDDED and embedded.running_url(s.state_dir) is None
    if s.broker_url == EMBEDDED:
        embedded.ensure_running(s.state_dir)
    with embedded.supervising(s.state_dir):  # the broker is ours: no worker's exit stops it
        return _supervise(s, processes, stop_after, started_broker)


def _supervise(
    s: settings_mod.Settings,
    processes: list[Process],
    stop_after: float | None,
    started_broker: bool,
) -> int:
    stop_wait = stop_timeout(s) if stop_after is None else stop_after
    made = None
    if any(p.name == "flower" for p in processes):
        made = flower.credentials(s.state_dir, os.environ)
    sup = Supervisor(processes, stop_wait, s.restart_backoff_s, made.as_env() if made else None)
    if made is not None and made.made_now:  # printed this once; kept in the state folder
        sup.say(
            f"flower: {flower.address(os.environ)} user {made.user} password {made.password} "
            f"(made now, kept in {s.state_dir / flower.FILE}; FLOWER_USER/FLOWER_PASSWORD "
            "choose others)"
        )
    if (note := root_note(processes)) is not None:
        sup.say(note)
    stop_now = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_now.set())
    for p in processes:
        sup.start(p)
    next_check = time.monotonic() + s.liveness_every_s
    try:
        while not stop_now.wait(0.5):
            url = s.broker_url
            if s.broker_url == EMBEDDED:
                url = embedded.ensure_running(s.state_dir)  # same port and password: clients
                # reconnect
            for p in processes:
                sup.tend(p)
            if sup.failed:
                sup.say(f"{sup.failed}: stopping everything")
                break
            if time.monotonic() >= next_check:
                sup.check_alive(url)
                next_check = time.monotonic() + s.liveness_every_s
    finally:
        sup.stop()
        if started_broker:
            embedded.stop(s.state_dir, forget=False)  # ours: stopped; its address is kept
    if sup.failed:
        print(f"error: {sup.failed}", file=sys.stderr)
        return 1
    return 0
