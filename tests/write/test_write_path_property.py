"""A privacy property of the write path, in the spirit of the read path's: random rooms,
speakers, switches, earlier memories and scripted model answers (honest, confused or hostile);
whatever the model says, every stored row's subject and evidence obey the rules, no prompt
holds a row about someone the spell may not see, and no row outside the spell's audience is
changed."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert, select

from memory_worker import app_side
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.constants import EVENTS, KINDS
from memory_worker.core.errors import MalformedAnswer
from memory_worker.models.scripted import ScriptedChat
from memory_worker.storage import store
from tests.examples import examples
from tests.write_helpers import assert_write_rules, plant, rows, run_spell

pytestmark = pytest.mark.store

NAMES = ["Ann", "Bo Lind", "Cyrus", "Dee", "Eli", "Fay"]
HUMANS = list(range(1, len(NAMES) + 1))


@st.composite
def worlds(draw: st.DrawFn) -> dict:
    members = draw(st.lists(st.sampled_from(HUMANS), min_size=1, max_size=4, unique=True))
    kind = "private" if len(members) == 1 and draw(st.booleans()) else "group"
    memory_on = {u: draw(st.integers(0, 3)) > 0 for u in HUMANS}  # mostly on
    muted = {u for u in HUMANS if draw(st.integers(0, 5)) == 0}
    personas = ["warren", *(["nolan"] if draw(st.booleans()) else [])]
    speakers = [f"u:{u}" for u in members] + personas
    said = draw(st.lists(st.sampled_from(speakers), min_size=1, max_size=10))
    earlier = draw(
        st.lists(
            st.tuples(st.sampled_from(["human", "self", "world"]), st.sampled_from(HUMANS)),
            max_size=6,
        )
    )
    return dict(
        members=members, kind=kind, memory_on=memory_on, muted=muted, personas=personas,
        said=said, earlier=earlier, answer=draw(answers(len(said), members)),
    )  # fmt: skip


@st.composite
def answers(draw: st.DrawFn, n_lines: int, members: list[int]) -> dict:
    """What a model might answer, candidate by candidate: mostly plausible (so the guards are
    exercised one by one), sometimes confused or hostile."""
    mine = [f"u:{u}" for u in members]
    strangers = [f"u:{u}" for u in [*HUMANS, 99] if u not in members]
    subjects = mine * 4 + ["self", "world"] * 3 + strangers + ["u:x", "Ann", ""]
    texts = [
        "{ref} likes jazz number {k}.",
        "{ref} likes jazz number {k}. {ref} hates opera.",
        "{name} stole bike number {k}.",
        "Bridge number {k} opened on Elm Street.",
        "Warren will call {ref} about plan {k}.",
        "{ref} " + "x" * 220,
    ]
    world_texts = ["{name} won prize number {k}.", "A prize went to {ref} in round {k}."]
    cands = []
    for k in range(draw(st.integers(0, 30))):
        subject = draw(st.sampled_from(subjects))
        ref = draw(st.sampled_from([subject, *mine, "someone"])) if subject else "someone"
        pool = world_texts if subject == "world" and draw(st.booleans()) else texts
        text = draw(st.sampled_from(pool)).format(ref=ref, name=draw(st.sampled_from(NAMES)), k=k)
        cands.append(
            {
                "subject": subject,
                "kind": draw(st.sampled_from([*KINDS, *KINDS, "secret"])),
                "text": text,
                "importance": draw(st.sampled_from([*range(3, 11), *range(3, 11), 0, 12, "high"])),
                "evidence": draw(
                    st.lists(st.integers(1, n_lines + (1 if k % 5 == 0 else 0)), min_size=1,
                             max_size=3)
                ),
                "counterpart": draw(st.sampled_from([*mine, *mine, None, *strangers])),
            }
        )  # fmt: skip
    return {"candidates": cands}


def route_answer(draw_events: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    def answer(prompt: str) -> dict:
        import json

        # the prompt's JSON, whatever follows it (a re-ask appends what failed)
        shown, _ = json.JSONDecoder().raw_decode(prompt.split("neighbours:", 1)[1].strip())
        return {
            "decisions": [
                {"candidate": c["candidate"], "event": e, "old_id": o}
                for c, (e, o) in zip(shown, draw_events * len(shown), strict=False)
            ]
        }

    return answer


def _fresh_store() -> tuple[str, tempfile.TemporaryDirectory]:
    tmp = tempfile.TemporaryDirectory()
    url = f"sqlite:///{Path(tmp.name) / 'memory.db'}"
    store.init_db(url)
    return url, tmp


@pytest.mark.slow  # 60 worlds through the write path, the slowest fast test: make test
@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    world=worlds(),
    router=st.lists(
        st.tuples(
            st.sampled_from(["ADD", "ADD", "ADD", *EVENTS, "DELETE"]),
            st.sampled_from(["0", "1", "2", "3", "99"]),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_whatever_the_model_answers_every_row_obeys_the_rules(world: dict, router) -> None:  # type: ignore[no-untyped-def]
    url, tmp = _fresh_store()
    before = settings_mod.current()
    settings_mod.configure(before.with_(database_url=url))
    try:
        _check(store.engine(url), world, router)
    finally:
        settings_mod.configure(before)
        store.engine(url).dispose()
        tmp.cleanup()


def _check(db, world: dict, router) -> None:  # type: ignore[no-untyped-def]
    with db.begin() as conn:
        for u, name in zip(HUMANS, NAMES, strict=True):
            app_side.add_user(conn, u, name, memory_on=world["memory_on"][u])
        for p in ("warren", "nolan"):
            app_side.add_persona(conn, p, p.title())
        for u in world["muted"]:
            conn.execute(insert(t.persona_memory_mute).values(user_id=u, persona="warren"))
        members = [f"u:{u}" for u in world["members"]] + world["personas"]
        app_side.add_room(conn, "r", world["kind"], members)
        for i, who in enumerate(world["said"]):
            app_side.say(conn, "r", who, f"line {i} said by someone")
    eligible = {u for u in world["members"] if world["memory_on"][u] and u not in world["muted"]}
    planted: dict[int, tuple[str, int]] = {}
    for what, u in world["earlier"]:
        secret = f"SECRET{len(planted)} of u:{u}."
        if what == "human":
            rid = plant(db, f"u:{u}", secret)
        elif what == "self":
            rid = plant(db, "self", secret, f"u:{u}")
        else:
            rid = plant(db, "world", f"SECRET{len(planted)} public news.")
        planted[rid] = (what, u)

    chat = ScriptedChat({"extract": world["answer"], "route": route_answer(router)})
    try:
        run_spell("warren", "r", chat)
        garbled = False
    except MalformedAnswer:  # asked twice, not one valid item: the task retries, then parks
        garbled = True

    assert_write_rules(db, planted=planted)
    stored = {r["id"]: r for r in rows(db)}
    for r in stored.values():
        if r["id"] in planted:
            continue
        about = r["counterpart"] if r["subject"] == "self" else r["subject"]
        if about != "world":
            assert int(about[2:]) in eligible, r  # memory on, not muted, a member
    prompts = "\n".join(p for _, _, p in chat.calls)
    for rid, (what, u) in planted.items():
        visible = what == "world" or u in eligible
        if not visible:
            assert f"SECRET{list(planted).index(rid)} " not in prompts
            assert stored[rid]["valid_to"] is None  # never changed by this spell
    with db.connect() as c:
        cursor = c.execute(select(t.cursors.c.last_line_id)).scalar()
    if garbled:  # nothing is "nothing" unless the model said so: the lines wait for a retry
        assert not cursor and len(stored) == len(planted)
    else:
        assert cursor == len(world["said"])  # the spell ended (committed or skipped)
