"""Toasts reach the app: the worker announces each stored toast on the human's Redis channel
(ids only), and the page's stream turns that into the user's own toasts, read from the store."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import Engine, select

from memory_worker import events
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.ops import toast_bus
from memory_worker.testing.gemini_stub import gemini_responder
from tests import scenes
from tests.scenes import CARA, DAN, extract_answer
from tests.test_controls import add_notice, add_row
from tests.web_server import Served, serve
from tests.worker import Pipeline

pytestmark = pytest.mark.pipeline

ARRIVAL_TIMEOUT_S = 60.0


def test_a_stored_toast_is_announced_on_the_humans_channel_with_ids_only(
    pipeline: Pipeline, redis_url: str
) -> None:
    scenes.people(pipeline.db)
    lines = scenes.private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    listener = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(toast_bus.channel(DAN), toast_bus.channel(CARA))
    try:
        events.room_quiet("dm-dan")
        deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = listener.get_message(timeout=1.0)
        assert msg is not None, "no toast announced"
        assert msg["channel"].decode() == toast_bus.channel(DAN)
        (notice,) = pipeline.wait_for_notices(1)
        posted = toast_bus.ToastPosted.from_message(msg["data"])
        assert posted == toast_bus.ToastPosted(
            notice["id"], DAN, "warren", "dm-dan", json.loads(notice["row_ids"])
        )
        raw = msg["data"].decode()
        with pipeline.db.connect() as c:
            texts = list(c.execute(select(t.persona_memory.c.text)).scalars())
        assert all(word not in raw for text in texts for word in text.split() if len(word) > 4), (
            raw
        )  # no word of what Warren remembers travels on the channel
        assert "noted" not in raw and "Xuhui" not in raw
        assert listener.get_message(timeout=0.5) is None  # Cara's channel heard nothing
    finally:
        listener.close()


@pytest.mark.parametrize(
    "raw",
    ['{"notice_id": "7", "user_id": 42, "persona": "w", "room_id": "r", "row_ids": []}',
     '{"notice_id": 7}', "not json", '{"notice_id": true, "user_id": 42, "persona": "w", '
     '"room_id": "r", "row_ids": []}'],
)  # fmt: skip
def test_a_malformed_channel_message_is_a_clear_error(raw: str) -> None:
    with pytest.raises(ValueError, match="toast message|integer id"):
        toast_bus.ToastPosted.from_message(raw)


# --- the stream, against the real server ------------------------------------------------------


@pytest.fixture
def two_people(db: Engine, redis_url: str) -> Iterator[tuple[Served, httpx.Client]]:
    """Dan signed in to a real `memory-worker serve` that listens on the test Redis."""
    scenes.people(db)
    settings = settings_mod.current().with_(broker_url=redis_url)
    with serve(settings, "--user", str(DAN)) as served, httpx.Client() as client:
        assert served.login_url
        assert client.get(served.login_url, follow_redirects=True).status_code == 200
        yield served, client


class Stream:
    """Reads one SSE stream in a thread; `events` fills as they arrive."""

    def __init__(self, client: httpx.Client, url: str):
        self.events: list[dict] = []
        self.opened = threading.Event()
        self.listening = threading.Event()  # the server subscribed and read the store once
        self.arrived = threading.Condition()
        self._client, self._url = client, url
        self._stop = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            self._read_events()
        except httpx.HTTPError:  # the server stopped at the end of the test
            pass

    def _read_events(self) -> None:
        with self._client.stream("GET", self._url, timeout=None) as r:
            self.status = r.status_code
            self.opened.set()
            current: dict = {}
            for line in r.iter_lines():
                if self._stop:
                    return
                if line == ": listening":
                    self.listening.set()
                elif line.startswith("event: "):
                    current["event"] = line[7:]
                elif line.startswith("data: "):
                    current["data"] = json.loads(line[6:])
                elif line == "" and current:
                    with self.arrived:
                        self.events.append(current)
                        self.arrived.notify_all()
                    current = {}

    def wait_for(self, n: int, timeout: float = ARRIVAL_TIMEOUT_S) -> list[dict]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.events) >= n, timeout=timeout)
            return list(self.events)

    def close(self) -> None:
        self._stop = True


def test_the_stream_shows_only_the_users_toasts_whatever_the_channel_says(
    db: Engine, redis_url: str, two_people
) -> None:  # type: ignore[no-untyped-def]
    served, client = two_people
    bus = redis.Redis.from_url(redis_url)
    stream = Stream(client, f"{served.base_url}/api/notices/stream")
    assert stream.opened.wait(10) and stream.status == 200
    # A forged announcement on Dan's channel names Cara's notice: it must show nothing of hers.
    caras = add_notice(db, CARA, [add_row(db, "u:17", "u:17 runs marathons.")])
    forged = toast_bus.ToastPosted(caras, DAN, "warren", "dm-cara", [1])
    bus.publish(toast_bus.channel(DAN), forged.to_message())
    # Then Dan's own toast, announced the way the worker does.
    dans = add_notice(db, DAN, [add_row(db, "u:42", "u:42 owns a flat in Xuhui.")])
    bus.publish(
        toast_bus.channel(DAN),
        toast_bus.ToastPosted(dans, DAN, "warren", "dm-dan", [2]).to_message(),
    )
    got = stream.wait_for(1)
    stream.close()
    toasts = [e["data"] for e in got if e.get("event") == "toast"]
    assert [n["id"] for n in toasts] == [dans]
    assert all(n["id"] != caras for n in toasts)


def test_the_stream_needs_a_session(db: Engine, two_people) -> None:  # type: ignore[no-untyped-def]
    served, _ = two_people
    r = httpx.get(f"{served.base_url}/api/notices/stream")
    assert r.status_code == 401


def test_without_redis_the_stream_still_delivers_from_the_store(db: Engine, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No Redis to listen to (the embedded one is not running): the rail reads the store."""
    from memory_worker.core.settings import EMBEDDED

    scenes.people(db)
    settings = settings_mod.current().with_(broker_url=EMBEDDED, state_dir=tmp_path / "none")
    with serve(settings, "--user", str(DAN)) as served, httpx.Client() as client:
        assert any("read from the store" in line for line in served.output)
        assert served.login_url
        client.get(served.login_url, follow_redirects=True)
        stream = Stream(client, f"{served.base_url}/api/notices/stream")
        assert stream.opened.wait(10) and stream.status == 200
        dans = add_notice(db, DAN, [add_row(db, "u:42", "u:42 owns a flat in Xuhui.")])
        got = stream.wait_for(1)
        stream.close()
    assert [e["data"]["id"] for e in got if e.get("event") == "toast"] == [dans]


def test_a_toast_arrives_on_the_channel_nudge_not_the_poll(db: Engine, redis_url: str) -> None:
    """With the store read only every 10 minutes, a toast still arrives: the nudge did it."""
    scenes.people(db)
    settings = settings_mod.current().with_(broker_url=redis_url)
    with serve(settings, "--user", str(DAN), "--rail-poll-s", "600") as served, httpx.Client() as c:
        assert served.login_url
        c.get(served.login_url, follow_redirects=True)
        stream = Stream(c, f"{served.base_url}/api/notices/stream")
        assert stream.listening.wait(10) and stream.status == 200
        dans = add_notice(db, DAN, [add_row(db, "u:42", "u:42 owns a flat in Xuhui.")])
        posted = toast_bus.ToastPosted(dans, DAN, "warren", "dm-dan", [1])
        redis.Redis.from_url(redis_url).publish(toast_bus.channel(DAN), posted.to_message())
        got = stream.wait_for(1, timeout=30)
        stream.close()
    assert [e["data"]["id"] for e in got if e.get("event") == "toast"] == [dans]
