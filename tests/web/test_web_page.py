"""What the page shows, from rows a real spell wrote: a world row appears on the page of each
human whose line it cites, and its evidence quotes that human and the persona, never the other
human's words."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from memory_worker import app_side, events
from memory_worker.models.scripted import candidate
from memory_worker.testing.gemini_stub import gemini_responder
from memory_worker.web.app import create_app
from tests.scenes import CARA, DAN, people
from tests.worker import Pipeline

pytestmark = pytest.mark.pipeline


def page_as(app, user_id: int) -> dict:  # type: ignore[no-untyped-def]
    client = TestClient(app, base_url="http://127.0.0.1")
    assert client.get(f"/login?token={app.state.login_links.mint(user_id)}").status_code == 200
    return client.get("/api/page").json()


def group_chat(db: Engine) -> tuple[int, int]:
    with db.begin() as conn:
        app_side.add_room(conn, "lunch", "group", [f"u:{DAN}", f"u:{CARA}", "warren"])
        dans = app_side.say(conn, "lunch", DAN, "Nolan's Odyssey opened on July 17, I saw it.")
        caras = app_side.say(conn, "lunch", CARA, "Me too, and I cried at the end, my secret.")
    return dans, caras


def test_a_world_row_shows_each_cited_human_only_their_own_words_as_evidence(
    pipeline: Pipeline,
) -> None:
    people(pipeline.db)
    dans, caras = group_chat(pipeline.db)
    fact = candidate("world", "fact", "Nolan's Odyssey opened on July 17.", 5, [dans, caras])
    pipeline.stub.chat_responder = gemini_responder({"candidates": [fact]})
    events.room_quiet("lunch")
    outcome = pipeline.wait_for_spell("warren", "lunch", caras)
    assert outcome["status"] == "committed", outcome["reason"]
    app = create_app(secret_key="k" * 40)
    for me, mine, theirs in ((DAN, dans, caras), (CARA, caras, dans)):
        (section,) = page_as(app, me)["personas"]
        (line,) = section["lines"]
        assert line["text"] == "Nolan's Odyssey opened on July 17."
        quoted = {e["id"]: e["text"] for e in line["evidence_lines"]}
        assert quoted[mine] is not None and quoted[theirs] is None
        html = TestClient(app, base_url="http://127.0.0.1")
        html.get(f"/login?token={app.state.login_links.mint(me)}")
        assert ("my secret" in html.get("/").text) == (me == CARA)
