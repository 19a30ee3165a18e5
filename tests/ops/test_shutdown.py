"""A stop hands unfinished work back quickly: SIGTERM (Celery's soft shutdown, as the Procfile
maps it) stops taking work; a model call in flight ends by its own HTTP timeout and its task
retries — a message in the broker — and the worker exits within the supervisor's stop timeout
(`runner.stop_timeout`: soft shutdown + model timeout + margin). The next worker commits the
spell at once, not after a visibility timeout."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import QUEUES
from memory_worker.ops import local_worker, runner
from memory_worker.testing.gemini_stub import gemini_responder
from tests.scenes import extract_answer, people, private_chat
from tests.worker import Pipeline, spare_database

pytestmark = pytest.mark.pipeline


def test_a_stopped_worker_hands_its_running_model_call_back_and_the_next_one_commits_it(
    pipeline: Pipeline, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """And says nothing false as it stops: no CRITICAL "TaskPool does not implement kill_job",
    with the pool the Procfile runs."""
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    # The shipped logic at a fifth of its time: a 2 s soft shutdown (10 s), a call's timeout
    # (5 s) longer than it, so the stop cancels the task while its call is still in flight.
    pipeline.use_timeout(5_000)
    pipeline.stub.hang_next(120.0, kind="chat")  # the first extract hangs past its timeout
    monkeypatch.setenv("REMAP_SIGTERM", "SIGQUIT")  # as the Procfile runs the workers
    monkeypatch.setenv("CELERY_CUSTOM_WORKER_POOL", "memory_worker.tasks.pools.threads:Threads")
    from memory_worker.tasks.celery_app import app
    from memory_worker.tasks.rooms import on_room_quiet

    url = spare_database(redis_url, 4)
    with app.connection_for_write(url) as conn:
        for queue in QUEUES:
            conn.default_channel.queue_purge(queue)
    s = settings_mod.current().with_(broker_url=url, worker_soft_shutdown_s=2.0)
    said = tmp_path / "stopped.log"
    first = local_worker.start(
        s, pool="custom", concurrency=2, name="stopped", loglevel="INFO", log=said
    )
    second: subprocess.Popen | None = None
    try:
        with app.connection_for_write(url) as conn:
            on_room_quiet.apply_async(("dm-dan",), connection=conn)
        deadline = time.monotonic() + 60
        while pipeline.stub.count("chat") < 1:
            assert time.monotonic() < deadline, "the extract call never arrived"
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)  # as `memory-worker run` stops it
        # It exits on its own within the supervisor's stop timeout: the soft shutdown, then
        # the call's own HTTP timeout. No SIGKILL needed, nothing left unacked.
        first.wait(timeout=runner.stop_timeout(s))
        log = said.read_text()
        assert "CRITICAL" not in log and "kill_job" not in log
        assert "left to the exit" in log  # the stop did cancel the running task
        second = local_worker.start(s, concurrency=2, name="next")
        # Well before the visibility timeout: the message went back to the queue at the stop.
        outcome = pipeline.wait_for_spell("warren", "dm-dan", lines[-1], timeout=60)
        assert outcome["status"] == "committed", outcome["reason"]
    finally:
        local_worker.stop(first)
        if second is not None:
            local_worker.stop(second)
