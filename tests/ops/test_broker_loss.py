"""A worker outlives its broker: the embedded Redis SIGKILLed under consuming workers of each
pool — prefork, and the Procfile's threads and solo — with nothing supervising them (plain
processes, not `memory-worker run`). Each must consume again, and nothing but the workers
themselves brings the broker back.

Before the fix (memory_worker/ops/transport.py) a worker holding unacked messages exited
with `CRITICAL Unrecoverable error: AttributeError("'NoneType' object has no attribute
'hostname'")`, and no process started the broker again."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, select

from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.settings import EMBEDDED
from memory_worker.ops import embedded, local_worker
from memory_worker.storage import notices
from memory_worker.testing.gemini_stub import GeminiStub

pytestmark = [pytest.mark.pipeline, pytest.mark.processes]

QUEUE_OF = {"prefork": "notify", "threads": "events", "solo": "commit"}  # one each
HELD = 3  # retries waiting out a countdown: unacked messages each worker holds at the kill
# From the kill to each worker's next task done: a deadline, not a bar (about a second on an
# idle host; a busy one takes longer). Far below the visibility timeout (10 min), which is
# what a worker that does not consume again would leave its messages to.
CONSUME_AGAIN_S = 90.0


def post_toast(db: Engine, spell_key: str) -> int:
    with db.begin() as conn:
        notice = notices.post(
            conn,
            user_id=1,
            persona="warren",
            room_id="dm-dan",
            spell_key=spell_key,
            text="Warren noted something.",
            row_ids=[],
            now="2026-01-01T00:00:00+00:00",
        )
    assert notice is not None
    return notice


def delivered(db: Engine, notice_id: int) -> bool:
    with db.connect() as conn:
        return bool(
            conn.execute(select(t.notices.c.delivered).where(t.notices.c.id == notice_id)).scalar()
        )


def send(url: str, queue: str, spell_key: str, countdown: float | None = None) -> None:
    from celery import Celery

    probe = Celery("probe", broker=url, set_as_current=False)
    try:
        probe.send_task(
            "memory_worker.deliver_toasts", (spell_key,), queue=queue, countdown=countdown
        )
    finally:
        probe.close()


def until(what: str, condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.05)


def test_a_worker_of_each_pool_consumes_again_after_the_embedded_broker_is_killed_unsupervised(
    db: Engine, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    state = tmp_path / "broker"
    url = embedded.ensure_running(state)
    client = redis.Redis.from_url(url)
    s = gemini_stub.settings(settings_mod.current()).with_(broker_url=EMBEDDED, state_dir=state)
    logs = {pool: tmp_path / f"{pool}.log" for pool in QUEUE_OF}
    workers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for pool, queue in QUEUE_OF.items():
            workers[pool] = local_worker.start(
                s,
                queues=(queue,),
                pool=pool,
                procfile_pool=pool != "prefork",
                concurrency=2 if pool != "solo" else 1,
                name=f"loss-{pool}",
                loglevel="INFO",
                log=logs[pool],
            )
            for i in range(HELD):  # held unacked by the worker until their countdown
                send(url, queue, f"warren/held-{pool}/{i}", countdown=3600)
        until("each worker holding its messages", lambda: client.hlen("unacked") == 3 * HELD, 60)

        pid = int((state / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        until("the broker gone", lambda: not embedded._running(pid), 5)
        # Nobody here starts it: a worker's reconnect does, on the same address.
        until("the broker back", lambda: embedded.running_url(state) == url, CONSUME_AGAIN_S)

        notice_of = {}
        for pool, queue in QUEUE_OF.items():
            notice_of[pool] = post_toast(db, f"warren/after-{pool}/1")
            send(url, queue, f"warren/after-{pool}/1")
        for pool, notice in notice_of.items():
            left = CONSUME_AGAIN_S - (time.monotonic() - killed)
            proc = workers[pool]
            until(
                f"the {pool} worker's next task",
                lambda n=notice, p=proc: delivered(db, n) or p.poll() is not None,
                left,
            )
            assert proc.poll() is None, f"the {pool} worker exited: {logs[pool].read_text()}"
        for pool in workers:
            said = logs[pool].read_text()
            assert "CRITICAL" not in said and "Unrecoverable" not in said, said
        # What they held at the kill went back to the queue (and to them), not to wait out the
        # visibility timeout.
        until("the held messages back", lambda: client.hlen("unacked") == 3 * HELD, 90)
    finally:
        for proc in workers.values():
            proc.kill()
            proc.wait()
        embedded.stop(state)
