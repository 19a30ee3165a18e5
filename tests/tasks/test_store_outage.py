"""The store away is a pause, not a failure: a real worker, a real PostgreSQL of the test's own
(`testing.private_postgres`) stopped abruptly under a chain and started again.

Each step (and the fan-out of a quiet room) that meets the refused connection waits it out (one
WARNING, no traceback), keeps its room's claim, and finishes once the store is back, with the
model called once per step. Past
MW_STORE_OUTAGE_WAIT_S the spell is handed to the sweep and its claim freed at once. The app's
`room_quiet` never raises for it: its fan-out is sent all the same, and waits for the store."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from memory_worker import events
from memory_worker.core import settings as settings_mod
from memory_worker.core.tables import metadata
from memory_worker.ops import broker, inflight
from memory_worker.storage import store
from memory_worker.tasks import pipeline as chain_tasks
from memory_worker.tasks.celery_app import app
from memory_worker.tasks.rooms import on_room_quiet, sweep_lagging_rooms
from memory_worker.testing import private_postgres
from memory_worker.testing.gemini_stub import (
    default_embed_responder,
    gemini_responder,
    system_text,
)
from memory_worker.write import steps
from tests.scenes import extract_answer, people, private_chat
from tests.worker import Pipeline

pytestmark = [
    pytest.mark.pipeline,
    pytest.mark.slow,
    pytest.mark.skipif(not private_postgres.available(), reason="no initdb/pg_ctl here"),
]

HEARD_TIMEOUT_S = 60.0
ROUTER = "You are a smart memory manager"  # how the router's system instruction begins


@pytest.fixture(scope="module")
def server() -> Iterator[private_postgres.PrivatePostgres]:
    pg = private_postgres.PrivatePostgres().start()
    try:
        yield pg
    finally:
        store.dispose_all()
        pg.remove()


class Heard(logging.Handler):
    """The package's log records, as the worker's threads write them: what the test waits on."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.changed:
            self.records.append(record)
            self.changed.notify_all()

    def said(self, level: int, *parts: str) -> list[str]:
        with self.changed:
            return [
                r.getMessage()
                for r in self.records
                if r.levelno == level and all(p in r.getMessage() for p in parts)
            ]

    def wait_for(self, level: int, *parts: str, count: int = 1) -> None:
        with self.changed:
            heard = self.changed.wait_for(
                lambda: len(self.said(level, *parts)) >= count, HEARD_TIMEOUT_S
            )
        assert heard, f"never heard {count} × {parts} at {logging.getLevelName(level)}"


@dataclass
class Outage:
    pipeline: Pipeline
    pg: private_postgres.PrivatePostgres
    heard: Heard

    def down(self) -> None:
        self.pg.stop()

    def up(self) -> None:
        if not self.pg.running():
            self.pg.start()


@pytest.fixture
def outage(pipeline: Pipeline, server: private_postgres.PrivatePostgres) -> Iterator[Outage]:
    """The pipeline on the private PostgreSQL, a fresh schema, and an ear on the logs."""
    if not server.running():
        server.start()
    eng = store.engine(server.url)
    with eng.begin() as conn:
        metadata.drop_all(conn)
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    store.init_db(server.url)
    settings_mod.configure(settings_mod.current().with_(database_url=server.url))
    heard = Heard()
    package = logging.getLogger("memory_worker")
    level = package.level
    package.setLevel(logging.INFO)
    package.addHandler(heard)
    try:
        yield Outage(Pipeline(eng, pipeline.stub), server, heard)
    finally:
        if not server.running():
            server.start()  # the chains still waiting finish here, not in the next test
        package.removeHandler(heard)
        package.setLevel(level)


class Hold:
    """A model call held at the stub until released: the moment to stop the store between two
    steps of a chain."""

    def __init__(self) -> None:
        self.reached, self.released = threading.Event(), threading.Event()

    def wrap(self, answer: Callable[..., Any], when: Callable[..., bool]) -> Callable[..., Any]:
        def held(*args: Any) -> Any:
            if when(*args):
                self.reached.set()
                self.released.wait(HEARD_TIMEOUT_S)
            return answer(*args)

        return held


def a_private_chat(o: Outage) -> list[int]:
    people(o.pipeline.db)
    lines = private_chat(o.pipeline.db)
    o.pipeline.stub.chat_responder = gemini_responder(extract_answer(lines))
    return lines


def chain_sent_while_the_store_is_down(o: Outage) -> None:
    """The room's spell begun with the store up (its claim taken, as `start_spell` does), its
    chain sent once the store is down."""
    client = broker.client(str(app.conf.broker_url))
    token = inflight.claim(client, "warren", "dm-dan", settings_mod.current().inflight_ttl_s)
    spell = steps.begin("warren", "dm-dan")
    assert token and spell
    spell.inflight, spell.renewed = token, time.time()
    o.down()
    chain_tasks.spell_chain(spell).apply_async()


def claim_held() -> bool:
    client = broker.client(str(app.conf.broker_url))
    return client.get(inflight.key("warren", "dm-dan")) is not None


@pytest.mark.parametrize("step", ["on_room_quiet", "extract", "route", "commit"])
def test_a_step_that_meets_a_refused_store_finishes_when_it_returns_calling_the_model_once(
    outage: Outage, step: str
) -> None:
    lines = a_private_chat(outage)
    stub, hold = outage.pipeline.stub, Hold()
    if step == "route":  # stopped while the embedding call is out: the router meets it
        stub.embed_responder = hold.wrap(default_embed_responder, lambda *a: True)
    if step == "commit":  # stopped while the router's call is out: the commit meets it
        stub.chat_responder = hold.wrap(
            stub.chat_responder, lambda body: system_text(body).startswith(ROUTER)
        )
    if step == "on_room_quiet":  # the fan-out a quiet event sends meets it
        outage.down()
        on_room_quiet.delay("dm-dan")
    elif step == "extract":
        chain_sent_while_the_store_is_down(outage)
    else:
        events.room_quiet("dm-dan")
        assert hold.reached.wait(HEARD_TIMEOUT_S)
        outage.down()
        hold.released.set()
    task = f"memory_worker.{step}"
    outage.heard.wait_for(logging.WARNING, "the store is away", task)
    outage.heard.wait_for(logging.INFO, "the store is still away", task, count=3)
    assert claim_held() == (step != "on_room_quiet")  # kept: no second spell may begin
    outage.up()

    outcome = outage.pipeline.wait_for_spell("warren", "dm-dan", lines[-1])
    assert outcome["status"] == "committed", outcome["reason"]
    assert stub.count("chat") == 2 and stub.count("embed") == 1  # once per step
    assert len(outage.heard.said(logging.WARNING, "the store is away")) == 1
    assert outage.heard.said(logging.ERROR) == []
    assert outage.pipeline.wait_for_notices(1, delivered=True)


def test_a_spell_whose_wait_runs_out_is_handed_to_the_sweep_and_its_claim_freed_at_once(
    outage: Outage,
) -> None:
    settings_mod.configure(settings_mod.current().with_(store_outage_wait_s=1.0))
    lines = a_private_chat(outage)
    chain_sent_while_the_store_is_down(outage)
    outage.heard.wait_for(logging.ERROR, "handed to the sweep")
    assert not claim_held()  # freed with the ERROR, not a claim's lifetime later
    assert len(outage.heard.said(logging.WARNING, "the store is away")) == 1
    assert outage.pipeline.stub.count() == 0

    outage.up()
    assert sweep_lagging_rooms() == ["dm-dan"]  # free: started now
    outcome = outage.pipeline.wait_for_spell("warren", "dm-dan", lines[-1])
    assert outcome["status"] == "committed", outcome["reason"]


def test_room_quiet_with_the_store_down_returns_and_its_fan_out_starts_the_room_once_back(
    outage: Outage,
) -> None:
    lines = a_private_chat(outage)
    outage.down()
    events.room_quiet("dm-dan")  # returns: the app never sees the store's outage
    assert outage.heard.said(logging.WARNING, "room_quiet('dm-dan')", "left to the fan-out")
    outage.heard.wait_for(logging.WARNING, "on_room_quiet('dm-dan')", "the store is away")
    assert not claim_held()  # nothing was started while the store was away

    outage.up()  # no sweep: the fan-out the app's call sent starts the room
    outcome = outage.pipeline.wait_for_spell("warren", "dm-dan", lines[-1])
    assert outcome["status"] == "committed", outcome["reason"]
    assert outage.heard.said(logging.ERROR) == []
