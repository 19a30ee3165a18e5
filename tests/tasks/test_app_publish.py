"""The app's calls never wait long for the broker (docs/design.md §10.1): what the app says is
already in the store, so a message the broker does not take within MW_PUBLISH_TIMEOUT_S is left
to the sweep, with one log line, and the call returns."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_worker.storage import store
from tests.scenes import people, private_chat

APP = textwrap.dedent(
    """
    import logging
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    from memory_worker import events
    events.room_quiet("dm-dan")
    print("returned")
    """
)


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A "Redis" that accepts connections and never answers: a broker gone half-away."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    finally:
        server.close()


@pytest.mark.slow  # waits out the publish's real second, in a process of its own
def test_room_quiet_returns_while_the_broker_does_not_answer_and_says_so_once(
    tmp_path: Path, silent_broker: str
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    store.init_db(url)
    people(store.engine(url))
    private_chat(store.engine(url))  # the lines are in the store before the app calls
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    env = {**clean, "MW_DATABASE_URL": url, "REDIS_URL": silent_broker}
    # A publish that kept waiting on this broker would never return: the timeout here is only
    # the test's own guard, not a measure.
    out = subprocess.run(
        [sys.executable, "-c", APP], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "returned"
    said = [ln for ln in out.stderr.splitlines() if "not published" in ln]
    assert said == [
        "WARNING memory_worker.events memory_worker.on_room_quiet('dm-dan',) not published "
        "(no answer within 1s); the sweep will find it"
    ]
    assert "Traceback" not in out.stderr
