"""The page's inputs, parsed once and strictly: every number in a query or a header is ASCII
digits in range or a 400 (never a 500); a cursor is one this server signed for this user and
search; a search is case-blind in every script and refuses control characters, and says what
happened when it is too long or finds nothing; a walk down the pages never shows a line twice
or skips one while lines close and reopen — it says the list changed instead."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Connection, Engine
from starlette.testclient import TestClient

from memory_worker.storage import memories, store
from memory_worker.web.app import create_app
from tests import scenes
from tests.scenes import CARA, DAN
from tests.test_controls import add_row
from tests.web import test_web_security

pytestmark = pytest.mark.store

SECRET = "i" * 48
world = test_web_security.world  # Dan and Cara with their rooms; Dan has a note


def signed_in(user_id: int = DAN, secret: str = SECRET) -> TestClient:
    app = create_app(secret_key=secret)
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    assert client.get(f"/login?token={app.state.login_links.mint(user_id)}").status_code == 200
    return client


def ids_of(page: dict) -> list[int]:
    return [line["id"] for s in page["personas"] for line in s["lines"]]


# --- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/notices?after=¹",  # superscript one: str.isdigit says yes, int says no
        "/api/notices?after=٣",  # an Arabic-Indic three: int reads it as 3
        "/api/notices?after=-1",
        "/api/notices?after=99999999999999999999999",
        "/api/notices/stream?after=²",
        "/api/page?limit=②",
        "/api/page?limit=0",
        "/api/page?limit=201",
        "/api/page?limit=+5",
        "/api/page?cursor=o.²",
        "/api/page?cursor=o.%C2%B2",
        "/?cursor=o.%C2%B2",
    ],
)
def test_a_number_that_is_not_ascii_digits_in_range_is_a_400(world: Engine, path: str) -> None:
    answer = signed_in().get(path)
    assert answer.status_code == 400, answer.text


@pytest.mark.parametrize("last_event_id", ["¹", "٣", "1.0", "9" * 30])
def test_a_last_event_id_that_is_not_a_notice_id_is_a_400(
    world: Engine, last_event_id: str
) -> None:
    client = signed_in()
    for path in ("/api/notices", "/api/notices/stream"):
        answer = client.get(path, headers={"Last-Event-ID": last_event_id.encode()})
        assert answer.status_code == 400, (path, answer.text)


# --- cursors -----------------------------------------------------------------------------------


@pytest.fixture
def three_lines(world: Engine) -> list[int]:
    return [add_row(world, f"u:{DAN}", f"u:{DAN} likes tea number {i}.") for i in range(3)]


def test_a_cursor_the_page_never_gave_is_a_400(world: Engine, three_lines: list[int]) -> None:
    """Forged, well-formed, replayed by another user, for another search or by another
    server's secret: each is refused, on the API and on the page."""
    dan = signed_in()
    first = dan.get("/api/page", params={"limit": 1}).json()
    given = first["next_cursor"]
    assert dan.get("/api/page", params={"limit": 1, "cursor": given}).status_code == 200
    plain = given.rpartition(".")[0]  # what the page walks, without its signature
    searched = dan.get("/api/page", params={"limit": 1, "q": "tea"}).json()["next_cursor"]
    forged = [
        "o.9223372036854775807",
        "o.١٢",  # Arabic-Indic digits
        "c",
        plain,
        f"{plain}.AAAAAAAAAAAAAAAAAAAAAA",
        given + "x",
        searched,  # a cursor of another search
    ]
    for cursor in forged:
        answer = dan.get("/api/page", params={"limit": 1, "cursor": cursor})
        assert answer.status_code == 400 and answer.json()["error"] == "not a page cursor", cursor
        assert dan.get("/", params={"cursor": cursor}).status_code == 400, cursor
    add_row(world, f"u:{CARA}", f"u:{CARA} runs.", room_id="dm-cara")
    assert signed_in(CARA).get("/api/page", params={"limit": 1, "cursor": given}).status_code == 400
    other_server = signed_in(DAN, secret="o" * 48)
    assert other_server.get("/api/page", params={"limit": 1, "cursor": given}).status_code == 400


# --- the search --------------------------------------------------------------------------------


@pytest.mark.parametrize("q", ["\x00", "tea\x00", "\x1f", "\x7f", "a\nb"])
def test_a_search_holding_a_control_character_is_a_400(three_lines: list[int], q: str) -> None:
    client = signed_in()
    answer = client.get("/api/page", params={"q": q})
    assert answer.status_code == 400 and "control characters" in answer.json()["error"]
    page = client.get("/", params={"q": q})
    assert page.status_code == 400 and "control characters" in page.text


def test_a_search_over_the_limit_says_so(three_lines: list[int]) -> None:
    page = signed_in().get("/", params={"q": "t" * 201})
    assert page.status_code == 400
    assert "a search is at most 200 characters; this one has 201" in page.text
    assert "not one the page gave" not in page.text


def test_a_search_with_no_match_says_there_was_none(three_lines: list[int]) -> None:
    client = signed_in()
    page = client.get("/", params={"q": "zzznothing"})
    assert page.status_code == 200
    assert "No line holds “zzznothing”." in page.text and "is above" not in page.text
    found = client.get("/", params={"q": "TEA"})
    assert "Every line holding “TEA” is above." in found.text and "No line holds" not in found.text


SCRIPTS = {  # stored text → searches that must find it
    "u:42 meets Cara at Café Zoë.": ["CAFÉ", "café", "Cafe\u0301", "ZOË"],
    "u:42 reads ΣΟΦΊΑ every night.": ["σοφία", "ΣΟΦΊΑ", "Σοφία"],
    "u:42 lives in a ДОМ by the river.": ["дом", "Дом"],
    "u:42 lives on the Straße.": ["STRASSE", "strasse", "straße"],
    "u:42 plays ＴＥＮＮＩＳ.": ["tennis", "Tennis"],
}


def test_the_search_is_case_blind_in_every_script(world: Engine) -> None:
    """On SQLite (whose lower() and LIKE fold ASCII only) and on PostgreSQL whatever its
    locale: the text is folded once when written, the search the same way."""
    ids = {text: add_row(world, f"u:{DAN}", text) for text in SCRIPTS}
    for i in range(12):
        add_row(world, f"u:{DAN}", f"u:42 had coffee at the Café number {i}.")
    client = signed_in()
    for text, searches in SCRIPTS.items():
        for q in searches:
            found = ids_of(client.get("/api/page", params={"q": q}).json())
            if text.startswith("u:42 meets") and q in ("CAFÉ", "café", "Cafe\u0301"):
                assert ids[text] in found and len(found) == 13, q
            else:
                assert found == [ids[text]], q
    assert ids_of(client.get("/api/page", params={"q": "%"}).json()) == []  # LIKE's own, escaped


def test_the_migration_folds_the_rows_stored_before_it(world: Engine) -> None:
    from alembic import command

    cfg = store.alembic_config(str(world.url))
    with world.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0020")
    with world.begin() as conn:
        old = scenes.row_as_stored_before(conn, f"u:{DAN}", "u:42 loves the CAFÉ Zoë.")
    store.init_db(str(world.url))
    assert ids_of(signed_in().get("/api/page", params={"q": "café"}).json()) == [old]


# --- a walk while lines close and reopen ----------------------------------------------------


@pytest.fixture
def walk(world: Engine) -> dict[str, list[int]]:
    """63 open lines about Dan and 12 closed ones (the issue's walk), and one of Cara's."""
    opened = [add_row(world, f"u:{DAN}", f"u:42 open line {i}.") for i in range(63)]
    closed = [
        add_row(world, f"u:{DAN}", f"u:42 closed line {i}.", valid_to="2026-11-01")
        for i in range(12)
    ]
    cara = add_row(world, f"u:{CARA}", "u:17 runs marathons.", room_id="dm-cara")
    return {"open": opened, "closed": closed, "cara": [cara]}


def _walk(client: TestClient, limit: int = 20, cursor: str | None = None) -> list[int]:
    seen: list[int] = []
    while True:
        page = client.get(
            "/api/page", params={"limit": limit} | ({"cursor": cursor} if cursor else {})
        )
        assert page.status_code == 200, page.text
        seen += ids_of(page.json())
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return seen


def _close_one_shown(conn: Connection, shown: list[int], walk: dict[str, list[int]]) -> None:
    memories.close(conn, shown[0], "2026-12-07", None)  # it would be shown again, closed


def _reopen_one_closed(conn: Connection, shown: list[int], walk: dict[str, list[int]]) -> None:
    memories.reopen(conn, [walk["closed"][0]])  # above the cursor now: never shown


@pytest.mark.parametrize("change", [_close_one_shown, _reopen_one_closed])
def test_a_line_closed_or_reopened_during_a_walk_ends_it_with_the_list_changed(
    world: Engine, walk: dict[str, list[int]], change: Callable[..., None]
) -> None:
    """The issue's walk repeated an open line closed after it was shown (51 of 63) and never
    showed a closed one reopened meanwhile (12 of 12): now the next page says so, and a walk
    from the top shows each line once."""
    client = signed_in()
    first = client.get("/api/page", params={"limit": 20}).json()
    with world.begin() as conn:
        change(conn, ids_of(first), walk)
    answer = client.get("/api/page", params={"limit": 20, "cursor": first["next_cursor"]})
    assert answer.status_code == 409 and answer.json()["changed"] is True
    page = client.get("/", params={"cursor": first["next_cursor"]})
    assert page.status_code == 409 and "changed while you scrolled" in page.text
    seen = _walk(client)  # from the top again: each line once
    assert sorted(seen) == sorted(walk["open"] + walk["closed"]) and len(seen) == len(set(seen))


def test_another_humans_lines_closing_leave_the_walk_alone(
    world: Engine, walk: dict[str, list[int]]
) -> None:
    client = signed_in()
    first = client.get("/api/page", params={"limit": 20}).json()
    with world.begin() as conn:
        memories.close(conn, walk["cara"][0], "2026-12-07", None)
    seen = ids_of(first) + _walk(client, cursor=first["next_cursor"])
    assert seen == sorted(walk["open"], reverse=True) + sorted(walk["closed"], reverse=True)


def test_more_toggles_since_a_walk_began_than_are_read_count_as_a_change(
    world: Engine, walk: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whom a toggled row concerns is checked for the few toggled since the walk began; past
    the bound, the walk starts again rather than reading on."""
    monkeypatch.setattr(memories, "TOGGLED_READ_MAX", 2)
    caras = walk["cara"] + [
        add_row(world, f"u:{CARA}", f"u:17 runs {i}.", room_id="dm-cara") for i in range(2)
    ]
    client = signed_in()
    first = client.get("/api/page", params={"limit": 20}).json()
    with world.begin() as conn:
        for row_id in caras:
            memories.close(conn, row_id, "2026-12-07", None)
    answer = client.get("/api/page", params={"limit": 20, "cursor": first["next_cursor"]})
    assert answer.status_code == 409
