"""The page pages: `GET /api/page` answers a bounded page of the rows about the human (open ones
newest first, then closed ones) with a cursor to the next, finds lines by their text and counts
every persona's lines; "clear all" still clears every line, not only the page's."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, insert, select
from starlette.testclient import TestClient

from memory_worker import controls
from memory_worker.core import tables as t
from memory_worker.web.app import create_app
from tests.scenes import CARA, DAN, people

pytestmark = pytest.mark.store

WARREN_OPEN, WARREN_CLOSED, NOLAN_OPEN = 72, 23, 12  # every fourth of Warren's closed


def row(persona: str, subject: str, i: int, closed: bool) -> dict:
    return {
        "persona": persona,
        "subject": subject,
        "witnessed": json.dumps([DAN]),
        "room_id": "dm",
        "kind": "fact",
        "text": f"{subject} line {i}" + (" likes tea" if i % 10 == 0 else ""),
        "importance": 5,
        "evidence": "[]",
        "created": "2026-11-01T10:00:00+00:00",
        "valid_to": "2026-11-20" if closed else None,
    }


@pytest.fixture
def many(db: Engine) -> dict[str, list[int]]:
    """Warren's open and closed lines about Dan, Nolan's, and one about Cara, interleaved:
    their ids, by (persona, open or closed)."""
    people(db)
    spec = [("warren", i % 4 == 3) for i in range(WARREN_OPEN + WARREN_CLOSED)]
    spec += [("nolan", False)] * NOLAN_OPEN
    pm = t.persona_memory.c
    with db.begin() as c:
        for i, (persona, closed) in enumerate(spec):
            c.execute(insert(t.persona_memory).values(**row(persona, f"u:{DAN}", i, closed)))
            if i == 7:
                c.execute(insert(t.persona_memory).values(**row("warren", f"u:{CARA}", i, False)))
        found = c.execute(
            select(pm.id, pm.persona, pm.valid_to).where(pm.subject == f"u:{DAN}")
        ).all()
    out: dict[str, list[int]] = {}
    for i, persona, valid_to in found:
        out.setdefault(f"{persona} {'closed' if valid_to else 'open'}", []).append(i)
    return out


def signed_in(user_id: int = DAN) -> TestClient:
    app = create_app(secret_key="k" * 40)
    client = TestClient(app, base_url="http://127.0.0.1")
    assert client.get(f"/login?token={app.state.login_links.mint(user_id)}").status_code == 200
    return client


def ids_of(page: dict) -> list[int]:
    return [line["id"] for s in page["personas"] for line in s["lines"]]


def test_the_page_answers_a_bounded_page_and_a_cursor_through_every_line_in_order(
    many: dict[str, list[int]],
) -> None:
    """Open lines newest first, then closed ones newest first, 20 at a time; each page
    counts every persona's lines, not only its own."""
    client = signed_in()
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": 20} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/page", params=query).json()
        got = ids_of(page)
        assert len(got) <= 20 and (len(got) == 20 or page["next_cursor"] is None)
        counts = {s["persona"]: (s["open_count"], s["closed_count"]) for s in page["personas"]}
        assert counts == {"warren": (WARREN_OPEN, WARREN_CLOSED), "nolan": (NOLAN_OPEN, 0)}
        seen += sorted(got, key=lambda i: (i in many["warren closed"], -i))
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    opened = sorted(many["warren open"] + many["nolan open"], reverse=True)
    assert seen == opened + sorted(many["warren closed"], reverse=True)
    assert pages == -(-(WARREN_OPEN + WARREN_CLOSED + NOLAN_OPEN) // 20)


def test_the_page_finds_lines_by_their_text_and_refuses_a_cursor_it_never_gave(
    many: dict[str, list[int]], db: Engine
) -> None:
    client = signed_in()
    page = client.get("/api/page", params={"q": "LIKES TEA"}).json()
    pm = t.persona_memory.c
    with db.connect() as c:
        tea = c.execute(
            select(pm.id).where(pm.subject == f"u:{DAN}", pm.text.like("%likes tea"))
        ).scalars()
        assert sorted(ids_of(page)) == sorted(tea) and page["next_cursor"] is None
    assert "likes tea" in client.get("/", params={"q": "likes tea"}).text
    for bad in ({"cursor": "x.1"}, {"cursor": "o.-1"}, {"limit": "0"}, {"q": "q" * 201}):
        answer = client.get("/api/page", params=bad)
        assert answer.status_code == 400 and answer.json()["ok"] is False
    assert client.get("/", params={"cursor": "o.abc"}).status_code == 400


def test_clear_all_still_clears_every_line_beyond_the_first_page(
    many: dict[str, list[int]], db: Engine
) -> None:
    client = signed_in()
    assert len(ids_of(client.get("/api/page").json())) == 50
    assert "107 lines" in client.get("/clear").text
    assert controls.clear_all(DAN) == WARREN_OPEN + WARREN_CLOSED + NOLAN_OPEN
    page = client.get("/api/page").json()
    assert ids_of(page) == [] and page["next_cursor"] is None
    with db.connect() as c:
        left = c.execute(select(t.persona_memory.c.subject)).scalars().all()
        assert left == [f"u:{CARA}"], "Cara's line stays"
