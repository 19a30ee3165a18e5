"""Exactly-once, including order, through a real worker on a real Redis with the real
google-genai client at the stub: a late spell — held back by a 429's retry delay, or
redelivered after its worker died — changes nothing a newer spell decided; the same spell
enqueued twice writes and toasts once; a toast its commit did not deliver is delivered by the
commit's own retry, the room's next commit, or the sweep; each spell leaves one JSON log line
with no memory text."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from datetime import datetime
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, select

from memory_worker import app_side, events
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.constants import QUEUES
from memory_worker.core.rows import Spell
from memory_worker.models.scripted import candidate, transcript_ids
from memory_worker.ops import local_worker, toast_bus
from memory_worker.testing.gemini_stub import gemini_responder
from tests import bees
from tests.ops.test_worker_loss import children, other_database
from tests.scenes import DAN, extract_answer, people, private_chat
from tests.worker import SPELL_TIMEOUT_S, Pipeline, forget_inflight, redis_url_of, settle

pytestmark = pytest.mark.pipeline


def outcome_of(db: Engine, key: str, timeout: float = SPELL_TIMEOUT_S) -> dict:
    persona, room, last = key.split("/")
    s = t.spells.c
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.connect() as c:
            got = (
                c.execute(
                    select(t.spells).where(
                        s.persona == persona, s.room_id == room, s.last_line_id == int(last)
                    )
                )
                .mappings()
                .first()
            )
        if got is not None and got["status"] != "parked":
            return dict(got)
        time.sleep(0.02)
    with db.connect() as c:
        seen = [dict(r) for r in c.execute(select(t.spells)).mappings()]
    raise AssertionError(f"no final outcome for {key} in {timeout}s: {seen}")


def memory(db: Engine) -> list[dict]:
    with db.connect() as c:
        return [dict(r) for r in c.execute(select(t.persona_memory)).mappings()]


def notices(db: Engine) -> list[dict]:
    with db.connect() as c:
        return [dict(r) for r in c.execute(select(t.notices)).mappings()]


@pytest.fixture
def dm(pipeline: Pipeline) -> Pipeline:
    people(pipeline.db)
    with pipeline.db.begin() as conn:
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
    pipeline.stub.chat_responder = gemini_responder(bees.extract)
    return pipeline


def newer_spells_close_the_bees(p: Pipeline) -> None:
    """B reads lines 1..2 and notes the bees; C reads line 3 and closes the fact."""
    bees.say(p.db, bees.MORE)
    events.room_quiet("dm-dan")
    assert outcome_of(p.db, "warren/dm-dan/2")["status"] == "committed"
    bees.say(p.db, bees.STOPPED)
    events.room_quiet("dm-dan")
    assert outcome_of(p.db, "warren/dm-dan/3")["status"] == "committed"


def assert_the_bees_stay_closed_and_were_noted_once(p: Pipeline) -> None:
    rows = [r for r in memory(p.db) if r["text"] == bees.FACTS[bees.KEEPS]]
    assert len(rows) == 1 and rows[0]["valid_to"] is not None  # not reopened, not re-added
    assert len(notices(p.db)) == 1  # B's "noted", and no second one


def test_a_spell_held_back_by_a_retry_delay_changes_nothing_a_newer_spell_decided(
    dm: Pipeline,
) -> None:
    bees.say(dm.db, bees.KEEPS)
    # A's extract: a 503 asking for 6 s (a 429 would pause every worker alike, B and C too)
    dm.stub.fail_next(503, retry_delay="6s", kind="chat")
    events.room_quiet("dm-dan")
    deadline = time.monotonic() + SPELL_TIMEOUT_S
    while dm.stub.count("chat") < 1:  # A began with line 1 alone
        assert time.monotonic() < deadline, "A's extract never arrived"
        time.sleep(0.02)
    # A's in-flight claim lapsed while it waited (a retry longer than INFLIGHT_TTL_S): newer
    # spells of the same room may begin — the case the commit's order check exists for.
    forget_inflight(redis_url_of(None))
    newer_spells_close_the_bees(dm)
    assert outcome_of(dm.db, "warren/dm-dan/1", timeout=60)["status"] == "covered"
    assert_the_bees_stay_closed_and_were_noted_once(dm)


def test_a_spell_redelivered_after_its_worker_died_changes_nothing_a_newer_spell_decided(
    dm: Pipeline, redis_url: str
) -> None:
    gate = threading.Event()
    respond = gemini_responder(bees.extract)

    def held(body: dict) -> object:  # A's extract (line 1 alone) waits until we let it go
        from memory_worker.testing.gemini_stub import prompt_text

        if transcript_ids(prompt_text(body)) == [1]:
            gate.wait(60)
        return respond(body)

    dm.stub.chat_responder = held
    bees.say(dm.db, bees.KEEPS)
    from memory_worker.tasks.celery_app import app
    from memory_worker.tasks.rooms import on_room_quiet

    url = other_database(redis_url)  # A's own worker, which the session's worker cannot reach
    with app.connection_for_write(url) as conn:
        for queue in QUEUES:
            conn.default_channel.queue_purge(queue)
    proc = local_worker.start(
        settings_mod.current().with_(broker_url=url), pool="prefork", concurrency=1, name="late"
    )
    try:
        with app.connection_for_write(url) as conn:
            on_room_quiet.apply_async(("dm-dan",), connection=conn)
        deadline = time.monotonic() + 60
        while dm.stub.count("chat") < 1:
            assert time.monotonic() < deadline, "A's extract never arrived"
            time.sleep(0.05)
        (child,) = children(proc.pid)
        os.kill(child, signal.SIGKILL)  # the message goes back to the queue
        while dm.stub.count("chat") < 2:
            assert time.monotonic() < deadline, "A was never redelivered"
            time.sleep(0.05)
        newer_spells_close_the_bees(dm)  # on the session's worker, meanwhile
        gate.set()  # the redelivered A goes on: embed, route, commit
        assert outcome_of(dm.db, "warren/dm-dan/1")["status"] == "covered"
    finally:
        gate.set()
        local_worker.stop(proc)
    assert_the_bees_stay_closed_and_were_noted_once(dm)


def test_the_same_spell_enqueued_twice_writes_and_toasts_once(
    pipeline: Pipeline, redis_url: str
) -> None:
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    events.room_quiet("dm-dan")
    events.room_quiet("dm-dan")
    assert outcome_of(pipeline.db, f"warren/dm-dan/{lines[-1]}")["status"] == "committed"
    settle(redis_url)  # the second event's work, whatever it found to do, is done too
    (notice,) = pipeline.wait_for_notices(1)
    assert len(memory(pipeline.db)) == 2
    deadline = time.monotonic() + SPELL_TIMEOUT_S
    while notices(pipeline.db)[0]["delivered"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert len(notices(pipeline.db)) == 1


def test_a_toast_whose_message_was_lost_is_delivered_by_the_sweep(
    pipeline: Pipeline, redis_url: str
) -> None:
    from memory_worker.models.scripted import ScriptedChat, sensible_route
    from memory_worker.tasks.rooms import sweep_lagging_rooms
    from memory_worker.write import steps

    people(pipeline.db)
    lines = private_chat(pipeline.db)
    chat = ScriptedChat({"extract": extract_answer(lines), "route": sensible_route})
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    from memory_worker.models.hashing import HashingEmbedder

    spell = steps.run_route(
        steps.run_embed(steps.run_extract(spell, chat), HashingEmbedder()), chat
    )
    assert steps.run_commit(spell).status == "committed"  # ...its worker killed right after

    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.subscribe(toast_bus.channel(DAN))
    sweep_lagging_rooms(now=time.time() + 3600)  # an hour on: past the grace period
    deadline = time.monotonic() + SPELL_TIMEOUT_S
    heard = None
    while heard is None and time.monotonic() < deadline:
        msg = listener.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if msg is not None:
            heard = toast_bus.ToastPosted.from_message(msg["data"])
    assert heard is not None and heard.user_id == DAN
    (notice,) = notices(pipeline.db)
    assert heard.notice_id == notice["id"]
    while notices(pipeline.db)[0]["delivered"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def committed_without_its_toast(lines: list[int]) -> Spell:
    """A spell committed as a commit worker killed right after its transaction leaves it: the
    rows and the toast stored, the toast never told. Embedded by the configured embedder (the
    stub's), as the worker's later spells are."""
    from memory_worker import models
    from memory_worker.models.scripted import ScriptedChat, sensible_route
    from memory_worker.write import steps

    chat = ScriptedChat({"extract": extract_answer(lines), "route": sensible_route})
    spell = steps.begin("warren", "dm-dan")
    assert spell is not None
    spell = steps.run_route(
        steps.run_embed(steps.run_extract(spell, chat), models.embedder()), chat
    )
    assert steps.run_commit(spell).status == "committed"
    return spell


def heard_toasts(listener: Any, count: int) -> list[toast_bus.ToastPosted]:
    """The first `count` toast messages on a subscribed channel."""
    heard: list[toast_bus.ToastPosted] = []
    deadline = time.monotonic() + SPELL_TIMEOUT_S
    while len(heard) < count and time.monotonic() < deadline:
        msg = listener.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if msg is not None:
            heard.append(toast_bus.ToastPosted.from_message(msg["data"]))
    return heard


def test_a_toast_its_commit_did_not_deliver_is_delivered_by_the_rooms_next_commit(
    pipeline: Pipeline, redis_url: str
) -> None:
    """No sweep runs here (the session's worker has no beat): only the next spell's commit
    can deliver the first spell's toast."""
    people(pipeline.db)
    first = committed_without_its_toast(private_chat(pipeline.db))
    (left,) = notices(pipeline.db)
    assert not left["delivered"]
    with pipeline.db.begin() as conn:
        line = app_side.say(conn, "dm-dan", DAN, "I also collect vintage train tickets.")
    pipeline.stub.chat_responder = gemini_responder(
        {"candidates": [candidate("u:42", "fact", "u:42 collects train tickets.", 6, [line])]}
    )
    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.subscribe(toast_bus.channel(DAN))
    events.room_quiet("dm-dan")
    assert outcome_of(pipeline.db, f"warren/dm-dan/{line}")["status"] == "committed"
    heard = heard_toasts(listener, 2)
    assert sorted(h.notice_id for h in heard) == sorted(n["id"] for n in notices(pipeline.db))
    # told on the channel first, marked delivered after: wait for the mark, not a moment
    assert len(pipeline.wait_for_notices(2, delivered=True)) == 2, first.key


def test_a_commit_whose_toast_was_not_published_is_retried_with_it_and_toasts_once(
    pipeline: Pipeline, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toast is the commit's last act, retried as one task: the retry finds the spell
    recorded (nothing written twice) and tells the human."""
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    publish, refused = toast_bus.publish, threading.Event()

    def refuse_once(client: redis.Redis, posted: toast_bus.ToastPosted) -> bool:
        if not refused.is_set():
            refused.set()
            return False  # as when the broker is away: logged, not raised
        return publish(client, posted)

    monkeypatch.setattr(toast_bus, "publish", refuse_once)
    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.subscribe(toast_bus.channel(DAN))
    events.room_quiet("dm-dan")
    assert outcome_of(pipeline.db, f"warren/dm-dan/{lines[-1]}")["status"] == "committed"
    (heard,) = heard_toasts(listener, 1)
    (notice,) = notices(pipeline.db)
    assert refused.is_set() and heard.notice_id == notice["id"]
    deadline = time.monotonic() + SPELL_TIMEOUT_S
    while not notices(pipeline.db)[0]["delivered"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    settle(redis_url)
    assert len(memory(pipeline.db)) == 2 and len(notices(pipeline.db)) == 1


def test_the_frequent_sweep_hands_on_a_toast_once_it_is_the_default_lag_old(
    pipeline: Pipeline, redis_url: str
) -> None:
    """Seconds, not minutes: a commit delivers its toast within milliseconds, so one left
    MW_SWEEP_LAG_S (10 s at the default) was lost with its worker or broker."""
    from memory_worker.core.settings import Settings
    from memory_worker.tasks.rooms import sweep_lagging_rooms

    lag = Settings.from_env({}).sweep_lag_s
    assert settings_mod.current().sweep_lag_s == lag  # this test changes no setting
    people(pipeline.db)
    committed_without_its_toast(private_chat(pipeline.db))
    listener = redis.Redis.from_url(redis_url).pubsub()
    listener.subscribe(toast_bus.channel(DAN))
    # On the toast's own clock (when it was written), however long the steps above took.
    (posted,) = notices(pipeline.db)
    written = datetime.fromisoformat(posted["created"]).timestamp()
    sweep_lagging_rooms(recent=True, now=written + lag / 2)  # the commit's still, maybe
    assert listener.get_message(ignore_subscribe_messages=True, timeout=1.0) is None
    sweep_lagging_rooms(recent=True, now=written + lag + 2)
    (heard,) = heard_toasts(listener, 1)
    assert heard.notice_id == notices(pipeline.db)[0]["id"]


def test_each_spell_logs_one_json_line_with_counts_and_no_memory_text(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    events.room_quiet("dm-dan")
    assert outcome_of(pipeline.db, f"warren/dm-dan/{lines[-1]}")["status"] == "committed"
    deadline = time.monotonic() + SPELL_TIMEOUT_S
    spell_lines: list[dict] = []
    while not spell_lines and time.monotonic() < deadline:
        spell_lines = [
            json.loads(r.getMessage()) for r in caplog.records if r.name == "memory_worker.spell"
        ]
        time.sleep(0.02)
    (line,) = spell_lines
    assert line["key"] == f"warren/dm-dan/{lines[-1]}" and line["outcome"] == "committed"
    assert line["lines"] == [1, lines[-1]] and line["kept"] == 2 and line["rows"] == 2
    assert line["decisions"] == {"ADD": 2} and line["model_calls"] == 3
    assert line["tokens_in"] > 0 and line["ms"] >= 0
    said = ["Xuhui", "flat", "interview", "Congratulations"]
    for record in caplog.records:
        text = record.getMessage()
        assert not any(w in text for w in said), f"memory text in a log line: {text[:200]}"
