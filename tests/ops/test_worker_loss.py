"""Acks late, requeue on worker loss: a worker child killed mid-task loses nothing.

A separate worker process (prefork, so there is a child to kill) on its own Redis database,
so the session's in-process worker cannot take the message instead.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import QUEUES
from memory_worker.ops import local_worker
from memory_worker.testing.gemini_stub import gemini_responder
from tests.scenes import extract_answer, people, private_chat
from tests.worker import Pipeline

pytestmark = pytest.mark.pipeline


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(x) for x in text]
    return out


def other_database(url: str) -> str:
    """The same Redis, the next database number (15 wraps to 14)."""
    head, _, tail = url.rpartition("/")
    db = int(tail) if tail.isdigit() else 0
    return f"{head}/{db + 1 if db < 15 else 14}"


def test_a_task_whose_worker_child_dies_is_delivered_again_and_the_spell_commits(
    pipeline: Pipeline, redis_url: str
) -> None:
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    pipeline.stub.hang_next(60.0, kind="chat")  # the first extract hangs until we kill it

    from memory_worker.tasks.celery_app import app
    from memory_worker.tasks.rooms import on_room_quiet

    url = other_database(redis_url)
    s = settings_mod.current().with_(broker_url=url)
    with app.connection_for_write(url) as conn:
        for queue in QUEUES:  # only our queues: this may be the host's Redis
            conn.default_channel.queue_purge(queue)
    proc = local_worker.start(s, pool="prefork", concurrency=1, name="loss")
    try:
        with app.connection_for_write(url) as conn:
            on_room_quiet.apply_async(("dm-dan",), connection=conn)
        deadline = time.monotonic() + 60
        while pipeline.stub.count("chat") < 1:
            assert time.monotonic() < deadline, "the extract call never arrived"
            time.sleep(0.05)
        (child,) = children(proc.pid)
        os.kill(child, signal.SIGKILL)
        outcome = pipeline.wait_for_spell("warren", "dm-dan", lines[-1])
        assert outcome["status"] == "committed", outcome["reason"]
        assert pipeline.stub.count("chat") == 3  # the killed extract, then extract and route
    finally:
        local_worker.stop(proc)
