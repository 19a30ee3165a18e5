"""The Procfile on a fresh checkout, as an operator runs it: `memory-worker run` with
REDIS_URL set starts every process (beat's state folder created, Flower's credentials from
the environment), a spell goes through, and a SIGTERM tears it all down cleanly."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tenacity import Retrying, stop_after_delay, wait_fixed

from memory_worker import demo
from memory_worker.core import tables as t
from memory_worker.ops import local_worker
from memory_worker.storage import store
from tests.worker import spare_database

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret, with space:and colon"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, auth: tuple[str, str] | None = None) -> int:
    req = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def group_pids(pgids: set[int]) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) in pgids:
                    out.append(int(d.name))
            except ProcessLookupError:
                pass
    return out


def test_the_procfile_runs_from_a_fresh_checkout_and_stops_cleanly(
    tmp_path: Path, redis_url: str
) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("Procfile", "flowerconfig.py"):
        shutil.copy(REPO / name, checkout / name)
    db_url = f"sqlite:///{checkout / 'memory.db'}"
    store.init_db(db_url)
    broker_url = spare_database(redis_url, 2)
    ports = {"model": free_port(), "commit": free_port(), "events": free_port()}
    flower_port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "FLOWER"))}
    env = {
        **clean,
        "REDIS_URL": broker_url,
        "MW_DATABASE_URL": db_url,
        "MW_CASSETTE": str(demo.CASSETTE),
        "MW_TODAY": demo.DEMO_TODAY,
        "MW_METRICS_PORT_MODEL": str(ports["model"]),
        "MW_METRICS_PORT_COMMIT": str(ports["commit"]),
        "MW_METRICS_PORT_EVENTS": str(ports["events"]),
        "FLOWER_USER": "ops",
        "FLOWER_PASSWORD": PASSWORD,
        "FLOWER_PORT": str(flower_port),
        "PYTHONWARNINGS": f"ignore:{local_worker.ROOT_WARNING}",  # by message: see local_worker
    }
    from memory_worker.core import settings as settings_mod

    settings_mod.configure(settings_mod.current().with_(broker_url=redis_url))
    from memory_worker.core.constants import QUEUES
    from memory_worker.tasks.celery_app import app

    with app.connection_for_write(broker_url) as conn:
        for queue in QUEUES:
            conn.default_channel.queue_purge(queue)
    runner = subprocess.Popen(
        [sys.executable, "-m", "memory_worker.cli", "run"],
        env=env,
        cwd=checkout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pgids: set[int] = set()
    try:
        for attempt in Retrying(stop=stop_after_delay(120), wait=wait_fixed(0.5), reraise=True):
            with attempt:
                for name, port in ports.items():
                    assert get(f"http://127.0.0.1:{port}/healthz") == 200, name
                assert get(f"http://127.0.0.1:{flower_port}/", ("ops", PASSWORD)) == 200
        assert get(f"http://127.0.0.1:{flower_port}/", ("ops", "s3cret")) == 401
        assert (checkout / ".memory_worker" / "celerybeat-schedule").exists() or any(
            p.name.startswith("celerybeat-schedule")
            for p in (checkout / ".memory_worker").iterdir()
        )
        children = [
            int(x)
            for x in Path(f"/proc/{runner.pid}/task/{runner.pid}/children").read_text().split()
        ]
        pgids = {os.getpgid(c) for c in children}
        for pid in group_pids(pgids):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            assert "s3cret" not in cmdline  # never on a command line, where `ps` shows it

        eng = store.engine(db_url)
        demo.seed(eng)
        last = demo.say_all(eng, demo.FIRST_SPELL)
        from memory_worker.tasks.rooms import on_room_quiet

        with app.connection_for_write(broker_url) as conn:
            on_room_quiet.apply_async(("dm-dan",), connection=conn)
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.2), reraise=True):
            with attempt, eng.connect() as c:
                got = c.execute(t.spells.select()).mappings().first()
                assert got is not None and got["last_line_id"] == last
        assert got["status"] == "committed", got["reason"]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{ports['commit']}/metrics").read()
        assert b'mw_queue_depth{queue="commit"}' in metrics
    finally:
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=90) == 0
    assert group_pids(pgids) == []  # nothing left behind
