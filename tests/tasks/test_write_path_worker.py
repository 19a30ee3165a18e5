"""The write path's holes (docs/design.md §10) that live at the task level, through a real
Celery worker on a real Redis, the real google-genai client and the Gemini stub: one spell one
run, a backlog that drains, a malformed message refused, and no memory text in task messages'
reprs, events or results."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from celery.signals import before_task_publish, task_failure, task_unknown
from sqlalchemy import insert, select

from memory_worker import app_side, events
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.rows import Spell
from memory_worker.models.scripted import (
    candidate,
    transcript_ids,
)
from memory_worker.ops import inflight
from memory_worker.tasks import pipeline as tasks
from memory_worker.tasks.celery_app import app
from memory_worker.tasks.rooms import on_room_quiet
from memory_worker.testing.gemini_stub import gemini_responder
from memory_worker.write import steps
from tests.scenes import DAN, extract_answer, people, private_chat
from tests.worker import SPELL_TIMEOUT_S, Pipeline, settle

pytestmark = pytest.mark.pipeline


def cursor(pipeline: Pipeline, room: str = "dm-dan") -> int:
    with pipeline.db.connect() as c:
        q = select(t.cursors.c.last_line_id).where(t.cursors.c.room_id == room)
        return int(c.execute(q).scalar() or 0)


def row_texts(pipeline: Pipeline) -> list[str]:
    with pipeline.db.connect() as c:
        return list(c.execute(select(t.persona_memory.c.text)).scalars())


def test_hole8_five_quiet_events_at_once_cost_one_extraction(pipeline: Pipeline) -> None:
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    pipeline.stub.hang_next(1.0, kind="chat")  # the spell is still in flight for the others
    for _ in range(5):
        on_room_quiet("dm-dan")  # the fan-out itself, five times, as fast as it can run
    assert pipeline.wait_for_spell("warren", "dm-dan", lines[-1])["status"] == "committed"
    settle(str(app.conf.broker_url))
    extracts = [r for r in pipeline.stub.of_kind("chat") if "memory manager" not in str(r.body)]
    assert len(extracts) == 1 and pipeline.stub.count("chat") == 2
    assert len(row_texts(pipeline)) == 2


def test_hole8_the_claim_is_freed_when_the_spell_ends_so_the_next_quiet_spell_runs(
    pipeline: Pipeline,
) -> None:
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    events.room_quiet("dm-dan")
    pipeline.wait_for_spell("warren", "dm-dan", lines[-1])
    settle(str(app.conf.broker_url))
    from memory_worker.ops import broker

    assert broker.client(str(app.conf.broker_url)).get(inflight.key("warren", "dm-dan")) is None
    with pipeline.db.begin() as conn:
        more = app_side.say(conn, "dm-dan", DAN, "I adopted a dog called Biscuit.")
    pipeline.stub.chat_responder = gemini_responder(
        {"candidates": [candidate("u:42", "fact", "u:42 has a dog called Biscuit.", 6, [more])]}
    )
    events.room_quiet("dm-dan")
    assert pipeline.wait_for_spell("warren", "dm-dan", more)["status"] == "committed"
    assert "u:42 has a dog called Biscuit." in row_texts(pipeline)


@pytest.mark.parametrize("step", ["extract", "commit"])
def test_a_step_that_fails_for_a_bug_frees_its_rooms_claim_at_once_so_the_next_quiet_event_runs(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Not the store away (that path waits, then hands on): a step raising for any other reason
    ends its chain, and its room's claim goes with it (`StoreStep.on_failure`), not a claim's
    lifetime later. Celery runs `on_failure` before it sends `task_failure`: the event waited on."""
    from memory_worker.ops import broker

    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    run_step = f"run_{step}"
    real = getattr(steps, run_step)

    def bug(*_: object) -> None:
        raise ZeroDivisionError("a bug in the step")

    monkeypatch.setattr(steps, run_step, bug)
    failed = threading.Event()

    def heard(sender: object = None, **_: object) -> None:
        if getattr(sender, "name", None) == f"memory_worker.{step}":
            failed.set()

    task_failure.connect(heard, weak=False)
    try:
        events.room_quiet("dm-dan")
        assert failed.wait(SPELL_TIMEOUT_S)
    finally:
        task_failure.disconnect(heard)
    client = broker.client(str(app.conf.broker_url))
    assert client.get(inflight.key("warren", "dm-dan")) is None  # freed now, not in 60 s
    assert cursor(pipeline) == 0

    monkeypatch.setattr(steps, run_step, real)  # the bug fixed: the next quiet event mines it
    events.room_quiet("dm-dan")
    assert pipeline.wait_for_spell("warren", "dm-dan", lines[-1])["status"] == "committed"


def test_a_step_renews_the_claim_only_when_it_was_taken_more_than_ten_seconds_ago(
    redis_url: str,
) -> None:
    from types import SimpleNamespace

    from memory_worker.core.rows import Spell
    from memory_worker.ops import broker
    from memory_worker.tasks.model_step import renew_claim

    assert settings_mod.current().inflight_ttl_s == 60  # renews past a sixth of it: 10 s
    client = broker.client(redis_url)
    claimant = SimpleNamespace(conf=SimpleNamespace(broker_url=redis_url))
    token = inflight.claim(client, "warren", "dm-renew", ttl_s=5)
    assert token is not None
    try:
        spell = Spell("warren", "dm-renew", 0, 3, inflight=token, renewed=1_000.0)
        renew_claim(claimant, spell, now=1_009.0)  # taken 9 s ago: left alone
        assert client.ttl(inflight.key("warren", "dm-renew")) <= 5 and spell.renewed == 1_000.0
        renew_claim(claimant, spell, now=1_010.0)  # 10 s: renewed, and the spell says when
        assert client.ttl(inflight.key("warren", "dm-renew")) > 5 and spell.renewed == 1_010.0
    finally:
        inflight.release(client, "warren", "dm-renew", token)


def test_a_shorter_claim_is_taken_and_renewed_for_mw_inflight_ttl_s(redis_url: str) -> None:
    """MW_INFLIGHT_TTL_S sets the claim's lifetime and, with it, when a step renews: a sixth of
    it (2 s of 12), so a shorter claim is kept alive by a chain as a long one is."""
    from types import SimpleNamespace

    from memory_worker.core.rows import Spell
    from memory_worker.ops import broker
    from memory_worker.tasks.model_step import renew_claim

    before = settings_mod.current()
    settings_mod.configure(before.with_(broker_url=redis_url, inflight_ttl_s=12))
    client = broker.client(redis_url)
    claimant = SimpleNamespace(conf=SimpleNamespace(broker_url=redis_url))
    token = inflight.claim(client, "warren", "dm-short", settings_mod.current().inflight_ttl_s)
    assert token is not None
    try:
        client.expire(inflight.key("warren", "dm-short"), 3)  # as if 9 s had passed
        spell = Spell("warren", "dm-short", 0, 3, inflight=token, renewed=1_000.0)
        renew_claim(claimant, spell, now=1_001.9)  # under 2 s: left alone
        assert client.ttl(inflight.key("warren", "dm-short")) <= 3 and spell.renewed == 1_000.0
        renew_claim(claimant, spell, now=1_002.0)  # 2 s: renewed to the whole 12
        assert 3 < client.ttl(inflight.key("warren", "dm-short")) <= 12
        assert spell.renewed == 1_002.0
    finally:
        inflight.release(client, "warren", "dm-short", token)
        settings_mod.configure(before)  # the next test on this process renews at the default


def test_hole7_a_backlog_drains_window_by_window_through_the_worker(pipeline: Pipeline) -> None:
    settings_mod.configure(settings_mod.current().with_(spell_max_lines=100))
    people(pipeline.db)
    with pipeline.db.begin() as conn:
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        conn.execute(
            insert(t.lines),
            [
                dict(room_id="dm-dan", speaker="u:42", text=f"I tried dish {i}.", created="x")
                for i in range(1_000)
            ],
        )
    last = 1_000

    def one_fact(prompt: str) -> dict:
        first = transcript_ids(prompt)[0]
        return {"candidates": [candidate("u:42", "fact", f"u:42 tried dish {first}.", 4, [first])]}

    pipeline.stub.max_prompt_chars = 60_000
    pipeline.stub.chat_responder = gemini_responder(one_fact)
    events.room_quiet("dm-dan")  # once: the rest follows window by window
    assert pipeline.wait_for_spell("warren", "dm-dan", last)["status"] == "committed"
    assert cursor(pipeline) == last
    with pipeline.db.connect() as c:
        outcomes = list(c.execute(select(t.spells.c.status)).scalars())
    assert outcomes == ["committed"] * 10
    assert len(row_texts(pipeline)) == 10


def test_hole9_a_malformed_commit_message_is_refused_and_changes_nothing(
    pipeline: Pipeline, caplog
) -> None:  # type: ignore[no-untyped-def]
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    bad = {"persona": "warren", "room_id": "dm-dan", "after_line_id": 0, "last_line_id": "abc"}
    with caplog.at_level(logging.ERROR, logger="memory_worker.tasks.boundary"):
        tasks.commit.apply_async((bad,))
        tasks.commit.apply_async(({"persona": "warren"},))
        on_room_quiet.apply_async(([1, 2],))
        deadline = time.monotonic() + SPELL_TIMEOUT_S
        while len(caplog.records) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and all("rejected, nothing changed" in m for m in said)
    assert any("last_line_id: int_type" in m for m in said)
    assert cursor(pipeline) == 0
    # The room is not poisoned: the next quiet event mines it as usual.
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    events.room_quiet("dm-dan")
    assert pipeline.wait_for_spell("warren", "dm-dan", lines[-1])["status"] == "committed"
    assert cursor(pipeline) == lines[-1]


def test_a_queued_message_for_the_removed_notify_toast_task_is_dropped_and_the_worker_goes_on(
    pipeline: Pipeline,
) -> None:
    """Before the commit delivered its own toasts, the chain ended in `notify_toast`; a message
    of it still queued after an upgrade names a task the worker no longer has. Celery logs it
    and rejects it, not requeued, nothing retried: the toast it was for waits in the outbox,
    where the room's next commit or the sweep finds it."""
    people(pipeline.db)
    lines = private_chat(pipeline.db)
    pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    dropped = threading.Event()

    def heard(name: str | None = None, **_: object) -> None:
        if name == "memory_worker.notify_toast":
            dropped.set()

    old = {"spell": Spell("warren", "dm-dan", 0, lines[-1]).to_json(), "row_ids": []}
    task_unknown.connect(heard, weak=False)
    try:
        app.send_task(
            "memory_worker.notify_toast", ({**old, "status": "committed"},), queue="notify"
        )
        assert dropped.wait(SPELL_TIMEOUT_S)
    finally:
        task_unknown.disconnect(heard)
    settle(str(app.conf.broker_url))  # nothing left queued, reserved or waiting to retry
    events.room_quiet("dm-dan")
    assert pipeline.wait_for_spell("warren", "dm-dan", lines[-1])["status"] == "committed"
    assert pipeline.wait_for_notices(1, delivered=True)


def test_hole6_no_task_message_repr_event_or_result_carries_memory_text(
    pipeline: Pipeline,
) -> None:
    people(pipeline.db)
    with pipeline.db.begin() as conn:
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        line = app_side.say(conn, "dm-dan", DAN, "My zebra Marmalade is ill.")
    pipeline.stub.chat_responder = gemini_responder(
        {"candidates": [candidate("u:42", "fact", "u:42 has a zebra called Marmalade.", 7, [line])]}
    )
    published: list[dict] = []
    lock = threading.Lock()

    def keep(headers=None, body=None, **_: object) -> None:  # type: ignore[no-untyped-def]
        with lock:
            published.append({"headers": dict(headers or {}), "body": json.dumps(body)})

    seen_events: list[dict] = []
    receiver_ready = threading.Event()
    receivers = []

    def capture() -> None:
        with app.connection_for_read() as conn:
            recv = app.events.Receiver(conn, handlers={"*": seen_events.append})
            receivers.append(recv)
            receiver_ready.set()
            try:
                recv.capture(limit=None, timeout=SPELL_TIMEOUT_S, wakeup=True)
            except Exception:  # noqa: BLE001 - the capture ends by timeout or by close
                pass

    listener = threading.Thread(target=capture, daemon=True)
    listener.start()
    receiver_ready.wait(10)
    before_task_publish.connect(keep, weak=False)
    try:
        events.room_quiet("dm-dan")
        assert pipeline.wait_for_spell("warren", "dm-dan", line)["status"] == "committed"
        pipeline.wait_for_notices(1)
        settle(str(app.conf.broker_url))
    finally:
        before_task_publish.disconnect(keep)
        for recv in receivers:
            recv.should_stop = True
    names = [p["headers"].get("task") for p in published]
    assert "memory_worker.route" in names
    # The text travels in the chain's message bodies (candidates between steps) ...
    assert any("Marmalade" in p["body"] for p in published)
    # ... up to the commit, the chain's last step: it delivers the toast itself, so nothing
    # is sent after it.
    assert names[-1] == "memory_worker.commit" and "memory_worker.notify_toast" not in names
    # ... but never in what logs and events show of a task.
    for p in published:
        shown = f"{p['headers'].get('argsrepr')} {p['headers'].get('kwargsrepr')}"
        assert "armalade" not in shown and "zebra" not in shown
    task_events = [e for e in seen_events if str(e.get("type", "")).startswith("task-")]
    assert any(e["type"] == "task-succeeded" for e in task_events)
    assert not any("armalade" in json.dumps(e, default=str) for e in task_events)
    for name, task in app.tasks.items():
        if name.startswith("memory_worker."):
            assert task.resultrepr_maxsize == 0, name
