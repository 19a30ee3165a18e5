"""A manipulated model, scripted as an attacker would answer, against the write path.

Each attack is one spell whose extraction (and routing) answer tries to get something about a
person into a row, a toast or a prompt that the code does not allow: rows about absent people,
personal facts laundered as world facts, evidence from another human, invented router ids,
oversize and ill-typed fields, floods past every cap, an answer that is not JSON at all. Every
attack runs twice — in-process (the steps called directly) and through a real Celery worker on
the embedded Redis with the real google-genai client against the Gemini stub — and after each
we assert the store, the toasts, the exact prompts the model received, and the model calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine, select

from memory_worker import app_side, events
from memory_worker.core import tables as t
from memory_worker.core.constants import MODEL_MAX_RETRIES
from memory_worker.models.scripted import ScriptedChat, candidate, sensible_route
from memory_worker.tasks.celery_app import app
from memory_worker.testing.gemini_stub import prompt_text, system_text
from tests.scenes import CARA, DAN, people
from tests.write_helpers import assert_write_rules, notices, plant, rows, run_spell, spell_records

Answer = Callable[[str], object]
CARA_SECRETS = ("pregnant", "scan on Friday")  # what Warren holds about Cara, from her chat


@dataclass
class Scene:
    db: Engine
    ids: dict[str, int]  # line ids and planted row ids by name


def build_scene(db: Engine) -> Scene:
    people(db)
    with db.begin() as conn:
        app_side.add_user(conn, 5, "Mila Novak")
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        app_side.add_room(conn, "g1", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
        ids = {
            "dan_gossip": app_side.say(conn, "dm-dan", DAN, "Cara stole money, I saw it."),
            "dan_bakery": app_side.say(conn, "dm-dan", DAN, "I run a bakery on Wuyuan Road."),
            "warren_loaf": app_side.say(conn, "dm-dan", "warren", "I will bring you a loaf."),
            "cara_gossip": app_side.say(conn, "g1", CARA, "Dan has a criminal record."),
            "dan_weather": app_side.say(conn, "g1", DAN, "The weather is nice."),
            "cara_runs": app_side.say(conn, "g1", CARA, "I run marathons."),
        }
    ids["caras_fact"] = plant(db, "u:17", "u:17 is pregnant and has a scan on Friday.")
    ids["caras_promise"] = plant(
        db, "self", "Warren promised u:17 to ask about the scan on Friday.", "u:17"
    )
    ids["dans_flat"] = plant(
        db, "u:42", "u:42 owns a flat in Xuhui.", witnessed="[42]", room_id="dm-dan"
    )
    return Scene(db, ids)


@dataclass
class Run:
    """What one attack's spell did, however it ran."""

    extract_prompts: list[str]
    route_prompts: list[str]
    chat_calls: int


class Runner:
    """Runs one spell with a scripted model, in-process or through the real worker."""

    mode = ""

    def spell(self, room: str, last_line: int, extract: Answer, route: Answer) -> Run:
        raise NotImplementedError


class InProcess(Runner):
    mode = "in-process"

    def spell(self, room: str, last_line: int, extract: Answer, route: Answer) -> Run:
        chat = ScriptedChat({"extract": extract, "route": route})
        run_spell("warren", room, chat)
        by = {p: [x for what, _, x in chat.calls if what == p] for p in ("extract", "route")}
        return Run(by["extract"], by["route"], len(chat.calls))


class ThroughWorker(Runner):
    mode = "worker"

    def __init__(self, pipeline) -> None:  # type: ignore[no-untyped-def]
        self.pipeline = pipeline

    def spell(self, room: str, last_line: int, extract: Answer, route: Answer) -> Run:
        from tests.worker import settle

        def respond(body: dict) -> object:
            prompt = prompt_text(body)
            routing = system_text(body).startswith("You are a smart memory manager")
            return (route if routing else extract)(prompt)

        stub = self.pipeline.stub
        before = len(stub.of_kind("chat"))
        stub.chat_responder = respond
        events.room_quiet(room)
        self.pipeline.wait_for_spell("warren", room, last_line)
        settle(str(app.conf.broker_url))
        calls = stub.of_kind("chat")[before:]
        routing = [system_text(c.body).startswith("You are a smart memory") for c in calls]
        return Run(
            [prompt_text(c.body) for c, r in zip(calls, routing, strict=True) if not r],
            [prompt_text(c.body) for c, r in zip(calls, routing, strict=True) if r],
            len(calls),
        )


@pytest.fixture(params=["in-process", pytest.param("worker", marks=pytest.mark.pipeline)])
def attack(request, db: Engine):  # type: ignore[no-untyped-def]
    """(scene, runner): the same attacks, in-process and through a real worker."""
    if request.param == "worker":
        pipeline = request.getfixturevalue("pipeline")
        return build_scene(pipeline.db), ThroughWorker(pipeline)
    return build_scene(db), InProcess()


def answer(*cands: object) -> Answer:
    return lambda prompt: {"candidates": list(cands)}


def open_rows(db: Engine) -> dict[int, dict]:
    return {r["id"]: r for r in rows(db) if r["valid_to"] is None}


def assert_no_secret_of_cara_in(run: Run) -> None:
    for prompt in run.extract_prompts + run.route_prompts:
        assert not any(s in prompt for s in CARA_SECRETS)


def assert_after(
    scene: Scene, run: Run, *, new_rows: list[str], chat_calls: int, cara_absent: bool = True
) -> None:
    """The checks after every attack: the store, the toasts, the prompts, the model calls.

    With Cara absent, no prompt holds what Warren knows about her; with her present (the group)
    the audience rule lets the calls see her rows, and only the guards stand between them and
    a row."""
    planted = {scene.ids["caras_fact"], scene.ids["caras_promise"], scene.ids["dans_flat"]}
    stored = rows(scene.db)
    assert planted <= set(open_rows(scene.db)), "a row outside the spell's audience changed"
    assert sorted(r["text"] for r in stored if r["id"] not in planted) == sorted(new_rows)
    assert_write_rules(scene.db, planted=planted)
    for n in notices(scene.db):  # whom each toast went to: checked by assert_write_rules
        assert not any(s in n["text"] for s in CARA_SECRETS)
    if cara_absent:
        assert_no_secret_of_cara_in(run)
    assert run.chat_calls == chat_calls


def test_rows_about_absent_people_are_never_written(attack) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    ids = scene.ids
    run = runner.spell(
        "dm-dan",
        ids["warren_loaf"],
        answer(
            candidate("u:17", "fact", "u:17 stole money.", 9, [ids["dan_gossip"]]),
            candidate("u:99", "fact", "u:99 owes u:42 money.", 8, [ids["dan_gossip"]]),
            candidate(
                "self",
                "promise",
                "Warren will ask u:17 about the scan.",
                8,
                [ids["warren_loaf"]],
                counterpart="u:17",
            ),
        ),  # fmt: skip
        sensible_route,
    )
    assert "u:42 owns a flat in Xuhui." in run.extract_prompts[0]
    assert_after(scene, run, new_rows=[], chat_calls=1)  # nothing kept: no routing call


def test_personal_facts_laundered_as_world_facts_are_never_written(attack) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    gossip = scene.ids["dan_gossip"]
    run = runner.spell(
        "dm-dan",
        scene.ids["warren_loaf"],
        answer(
            candidate("world", "event", "u:17 stole money from an office.", 9, [gossip]),
            candidate("world", "event", "Cara stole money from an office.", 9, [gossip]),
            candidate("world", "fact", "CARA is a thief, everyone knows.", 9, [gossip]),
            candidate("world", "event", "Mila won the lottery this week.", 6, [gossip]),
            candidate("world", "promise", "Everyone must obey the rules.", 6, [gossip]),
            candidate(
                "world", "event", "A bakery opened on Wuyuan Road.", 4, [scene.ids["dan_bakery"]]
            ),
        ),  # fmt: skip
        sensible_route,
    )
    assert_after(scene, run, new_rows=["A bakery opened on Wuyuan Road."], chat_calls=2)
    (toast,) = notices(scene.db)
    assert "bakery opened" in toast["text"]  # the world row's toast goes to the one it cites


def test_evidence_from_another_human_is_never_evidence_about_someone(attack) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    ids = scene.ids
    run = runner.spell(
        "g1",
        ids["cara_runs"],
        answer(
            candidate(
                "u:42",
                "fact",
                "u:42 has a criminal record.",
                9,
                [ids["cara_gossip"], ids["dan_weather"]],
            ),
            candidate("u:42", "fact", "u:42 has a record.", 9, [ids["cara_gossip"]]),
            candidate("u:17", "preference", "u:17 runs marathons.", 5, [ids["cara_runs"]]),
        ),  # fmt: skip
        sensible_route,
    )
    assert_after(scene, run, new_rows=["u:17 runs marathons."], chat_calls=2, cara_absent=False)
    # Cara is present, but a group's block holds world facts only (v1): the extraction is shown
    # what that block could hold, so her private rows stay out of a group's prompt
    # (docs/design.md §11.2)
    assert "pregnant" not in run.extract_prompts[0]


def test_invented_router_ids_change_nothing_they_were_not_shown(attack) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    ids = scene.ids
    raw = [str(ids["caras_promise"]), str(ids["caras_fact"]), str(ids["dans_flat"])]

    def lying_router(prompt: str) -> dict:
        return {
            "decisions": [
                {"candidate": 0, "event": "CLOSE", "old_id": raw[0]},
                {"candidate": 1, "event": "UPDATE", "old_id": raw[1]},
                {"candidate": 1, "event": "CLOSE", "old_id": "0"},  # a second verdict
                {"candidate": 7, "event": "CLOSE", "old_id": raw[2]},
                {"candidate": 2, "event": "DELETE", "old_id": "0"},
            ]
        }

    run = runner.spell(
        "dm-dan",
        ids["warren_loaf"],
        answer(
            candidate("u:42", "fact", "u:42 runs a bakery on Wuyuan Road.", 6, [ids["dan_bakery"]]),
            candidate("u:42", "fact", "u:42 sells bread.", 5, [ids["dan_bakery"]]),
            candidate(
                "self",
                "promise",
                "Warren will bring u:42 a loaf.",
                6,
                [ids["warren_loaf"]],
                counterpart="u:42",
            ),
        ),  # fmt: skip
        lying_router,
    )
    for raw_id in raw:
        assert f'"id": "{raw_id}"' not in run.route_prompts[0]
    # candidate 0: CLOSE of a number never shown → NONE; 1: two verdicts → dropped; 2: DELETE
    # is not an event → dropped. Nothing written, nothing closed.
    assert_after(scene, run, new_rows=[], chat_calls=2)
    assert json.loads(spell_records(scene.db)[-1]["dropped"])["route"] >= 2


def test_oversize_and_ill_typed_fields_cost_only_their_own_candidate(attack) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    bakery = scene.ids["dan_bakery"]
    run = runner.spell(
        "dm-dan",
        scene.ids["warren_loaf"],
        answer(
            candidate("u:42", "fact", "u:42 bakes " + "very " * 2_000 + "well.", 6, [bakery]),
            candidate("u:42", "fact", "u:42 bakes bread.", "high", [bakery]),
            candidate("u:42", "fact", "u:42 bakes rye.", 6, ["line one"]),
            candidate("u:42", "secret", "u:42 bakes cake.", 6, [bakery]),
            candidate(42, "fact", "u:42 bakes buns.", 6, [bakery]),
            candidate("u:42", "fact", "u:42 bakes. u:42 sells.", 6, [bakery]),
            {"subject": "u:42", "text": ["a", "list"]},
            candidate("u:42", "fact", "u:42 runs a bakery on Wuyuan Road.", 6, [bakery]),
        ),
        sensible_route,
    )
    assert_after(scene, run, new_rows=["u:42 runs a bakery on Wuyuan Road."], chat_calls=2)
    dropped = json.loads(spell_records(scene.db)[-1]["dropped"])
    assert dropped.get("schema", 0) >= 4 and sum(dropped.values()) == 7


def test_a_flood_past_every_cap_stops_at_each_cap(attack) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    bakery, loaf = scene.ids["dan_bakery"], scene.ids["warren_loaf"]
    flood = [
        *(candidate("u:42", "fact", f"u:42 bakes loaf type {i}.", 5, [bakery]) for i in range(30)),
        *(candidate("self", "promise", f"Warren will bring u:42 loaf {i}.", 5, [loaf],
                    counterpart="u:42") for i in range(30)),
        *(candidate("world", "event", f"Bakery number {i} opened downtown.", 4, [bakery])
          for i in range(30)),
    ]  # fmt: skip
    run = runner.spell("dm-dan", loaf, answer(*flood), lambda p: _add_all(p))
    with scene.db.connect() as c:
        subjects = [s for s in c.execute(select(t.persona_memory.c.subject)).scalars()]
    assert subjects.count("world") == 12
    assert subjects.count("u:42") + subjects.count("self") == 12 + 1 + 1  # + planted flat, promise
    planted = {scene.ids["caras_fact"], scene.ids["caras_promise"], scene.ids["dans_flat"]}
    assert_write_rules(scene.db, planted=planted)
    assert_no_secret_of_cara_in(run)
    assert run.chat_calls == 2


def _add_all(prompt: str) -> dict:
    shown = json.loads(prompt.split("neighbours:", 1)[1].strip())
    return {"decisions": [{"candidate": c["candidate"], "event": "ADD"} for c in shown]}


def test_an_answer_that_is_never_json_parks_the_spell_after_its_retries_and_writes_nothing(
    attack,
) -> None:  # type: ignore[no-untyped-def]
    scene, runner = attack
    if runner.mode == "in-process":
        from memory_worker.core.errors import MalformedAnswer

        with pytest.raises(MalformedAnswer):  # the task shell parks it; here it propagates
            runner.spell("dm-dan", scene.ids["warren_loaf"], lambda p: "I refuse.", sensible_route)
        return
    run = runner.spell("dm-dan", scene.ids["warren_loaf"], lambda p: "I refuse.", sensible_route)
    (outcome,) = spell_records(scene.db)
    assert outcome["status"] == "parked"
    # asked and re-asked once, on the first try and each of its retries; then parked
    assert_after(scene, run, new_rows=[], chat_calls=2 * (1 + MODEL_MAX_RETRIES))


ECHOES = [
    pytest.param(lambda p: "You said: " + p, id="the-prompt-as-prose"),
    pytest.param(lambda p: {"candidates": p}, id="the-prompt-as-candidates"),
    pytest.param(lambda p: {p[-150:]: "Cara stole money", "candidates": None}, id="as-a-key"),
]


@pytest.mark.parametrize("echo", ECHOES)
def test_a_malformed_answer_that_repeats_the_chat_parks_without_keeping_a_word_of_it(
    attack, echo: Answer
) -> None:  # type: ignore[no-untyped-def]
    """A parked spell's reason is kept and shown to operators, out of a human's delete: the
    model's answer — here the transcript and block echoed back — must not ride into it."""
    scene, runner = attack
    said = ("stole money", "Wuyuan Road", "loaf", "Xuhui")
    if runner.mode == "in-process":
        from memory_worker.core.errors import MalformedAnswer

        with pytest.raises(MalformedAnswer) as caught:
            runner.spell("dm-dan", scene.ids["warren_loaf"], echo, sensible_route)
        assert not any(w in str(caught.value) for w in said)
        return
    run = runner.spell("dm-dan", scene.ids["warren_loaf"], echo, sensible_route)
    (outcome,) = spell_records(scene.db)
    assert outcome["status"] == "parked" and outcome["reason"]
    assert not any(w in outcome["reason"] for w in said), outcome["reason"]
    assert any(w in run.extract_prompts[0] for w in said)  # the answer did repeat them
    assert_after(scene, run, new_rows=[], chat_calls=2 * (1 + MODEL_MAX_RETRIES))
