"""The same facts told in a private chat and in a group at once, through a real worker on a real
Redis with the real google-genai client at the stub: each is one open row and one toast.

A group spell's calls are not shown the private chat's rows (their label forbids it), so both
spells write the fact; the commit's exactly-once across audiences folds them, whichever commits
first (docs/design.md §12).
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from memory_worker import app_side, events
from memory_worker.core import tables as t
from memory_worker.core.names import sentence_key
from memory_worker.models.scripted import candidate, route_payload
from memory_worker.testing.gemini_stub import prompt_text, system_text
from tests.scenes import CARA, DAN, people
from tests.worker import Pipeline, redis_url_of, settle

pytestmark = pytest.mark.pipeline

# Facts per human, each told in their private chat and in the group: at most six, or two
# rows of each (before the fold) would meet the daily cap of twelve new rows per human.
FACTS = 6
_SAID = re.compile(r"^\[(\d+)\] (u:\d+): I collect (\w+) stamps\.$", re.M)


def stamps(prompt: str) -> dict:
    """A fact about its speaker for every line that says what stamps they collect."""
    return {
        "candidates": [
            candidate(who, "preference", f"{who} collects {kind} stamps.", 6, [int(i)])
            for i, who, kind in _SAID.findall(prompt)
        ]
    }


def adds_unless_known(body: dict) -> object:
    """The router: a candidate whose sentence a neighbour says already is NONE, else ADD (these
    facts are all different: nothing updates anything)."""
    prompt = prompt_text(body)
    if not system_text(body).startswith("You are a smart memory manager"):
        return stamps(prompt)
    memories, cands = route_payload(prompt)
    text_of = {m["id"]: m["text"] for m in memories}
    decisions = []
    for c in cands:
        same = [n for n in c["neighbours"] if text_of[n] == c["text"]]
        event = {"event": "NONE", "old_id": same[0]} if same else {"event": "ADD"}
        decisions.append({"candidate": c["candidate"], **event})
    return {"decisions": decisions}


def test_the_same_fact_told_privately_and_in_a_group_at_once_is_one_row_and_one_toast(
    pipeline: Pipeline,
) -> None:
    people(pipeline.db)
    with pipeline.db.begin() as conn:
        app_side.add_room(conn, "dm-dan", "private", [f"u:{DAN}", "warren"])
        app_side.add_room(conn, "dm-cara", "private", [f"u:{CARA}", "warren"])
        app_side.add_room(conn, "g", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
    pipeline.stub.chat_responder = adds_unless_known
    kinds = {human: [f"k{human}n{n}x" for n in range(FACTS)] for human in (DAN, CARA)}
    rooms = {DAN: "dm-dan", CARA: "dm-cara"}
    for n in range(FACTS):
        with pipeline.db.begin() as conn:
            for human in (DAN, CARA):
                for room in (rooms[human], "g"):
                    app_side.say(conn, room, human, f"I collect {kinds[human][n]} stamps.")
        for room in ("dm-dan", "g", "dm-cara"):
            events.room_quiet(room)
    settle(redis_url_of(None))
    for room in ("dm-dan", "g", "dm-cara"):  # every line read, as the sweep would see to
        events.room_quiet(room)
    settle(redis_url_of(None))
    m = t.persona_memory.c
    with pipeline.db.connect() as c:
        open_rows = c.execute(select(m.text).where(m.valid_to.is_(None))).scalars().all()
        toasts = c.execute(select(t.notices.c.user_id, t.notices.c.text)).all()
    keys = [sentence_key(text) for text in open_rows]
    assert len(keys) == len(set(keys)), "a fact stored twice"
    every = [k for human in kinds for k in kinds[human]]
    assert {k for k in every if any(k in text for text in open_rows)} == set(every)
    twice = [
        k
        for human in kinds
        for k in kinds[human]
        if sum(k in text for who, text in toasts if who == human) > 1
    ]
    assert twice == [], f"{len(twice)} facts toasted twice"
