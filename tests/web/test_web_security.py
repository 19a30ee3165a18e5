"""The page's guards over HTTP: a user reaches only their own data, a write needs the
session's CSRF token, the session cookie cannot be forged, and the server stays on loopback."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from itsdangerous import TimestampSigner
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from memory_worker import controls
from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.web import page_model
from memory_worker.web.actions import ACTIONS
from memory_worker.web.app import create_app
from memory_worker.web.security import SECURITY_HEADERS, SESSION_COOKIE
from tests import scenes
from tests.scenes import CARA, DAN
from tests.test_controls import add_notice, add_row
from tests.web_server import serve

pytestmark = pytest.mark.store

SECRET = "s" * 48


@pytest.fixture
def world(db: Engine) -> Engine:
    """Dan and Cara, each with a row and a toast from Warren; Dan has a note."""
    scenes.people(db)
    scenes.private_chat(db)
    controls.set_note(DAN, "Call me Dan.")
    return db


@pytest.fixture
def rows(world: Engine) -> dict[str, int]:
    dans = add_row(world, "u:42", "u:42 owns a flat in Xuhui.")
    caras = add_row(world, "u:17", "u:17 runs marathons.", room_id="dm-cara")
    return {
        "dan_row": dans,
        "cara_row": caras,
        "dan_notice": add_notice(world, DAN, [dans]),
        "cara_notice": add_notice(world, CARA, [caras]),
    }


def snapshot(world: Engine) -> dict:
    """Everything a write could change."""
    with world.connect() as c:
        return {
            "rows": sorted(c.execute(select(t.persona_memory.c.id)).scalars()),
            "notices": sorted(c.execute(select(t.notices.c.id, t.notices.c.undone)).all()),
            "users": sorted(
                c.execute(select(t.users.c.id, t.users.c.memory_note, t.users.c.memory_on)).all()
            ),
            "mutes": sorted(c.execute(select(t.persona_memory_mute)).all()),
            "private": sorted(c.execute(select(t.persona_memory_stays_private)).all()),
            "rooms": c.execute(select(func.count()).select_from(t.rooms)).scalar(),
        }


@pytest.fixture
def app(world: Engine):  # type: ignore[no-untyped-def]
    return create_app(secret_key=SECRET)


def signed_in(app, user_id: int) -> tuple[TestClient, str]:  # type: ignore[no-untyped-def]
    """A browser-like client signed in through a one-time link, and its CSRF token."""
    client = TestClient(app, base_url="http://127.0.0.1")
    token = app.state.login_links.mint(user_id)
    assert client.get(f"/login?token={token}").status_code == 200
    return client, client.get("/api/session").json()["csrf_token"]


@pytest.fixture
def dan(app) -> Iterator[tuple[TestClient, str]]:  # type: ignore[no-untyped-def]
    client, csrf = signed_in(app, DAN)
    with client:
        yield client, csrf


def concrete(path: str, rows: dict[str, int], *, mine: bool = True) -> str:
    who = "dan" if mine else "cara"
    return (
        path.replace("{notice_id:int}", str(rows[f"{who}_notice"]))
        .replace("{row_id:int}", str(rows[f"{who}_row"]))
        .replace("{persona:str}", "warren")
    )


VALID_INPUT = {
    "/clear": {},
    "/note": {"note": "Something new."},
    "/switches/memory_on": {"on": False},
    "/personas/{persona:str}/forget_me": {"on": True},
    "/personas/{persona:str}/follow": {"on": False},
    "/rooms": {"persona": "warren", "incognito": True},
}


# --- another user's ids: refused, and refused exactly like ids that do not exist -------------


@pytest.mark.parametrize("kind", ["memories", "notices"])
def test_another_users_id_in_a_form_is_refused_like_a_missing_one(
    world: Engine, dan, rows, kind: str
) -> None:  # type: ignore[no-untyped-def]
    client, csrf = dan
    verb = "delete" if kind == "memories" else "undo"
    theirs = rows["cara_row" if kind == "memories" else "cara_notice"]
    before = snapshot(world)
    forged = client.post(f"/{kind}/{theirs}/{verb}", data={"csrf": csrf})
    missing = client.post(f"/{kind}/99999/{verb}", data={"csrf": csrf})
    assert forged.status_code == missing.status_code == 404
    assert forged.text == missing.text
    assert snapshot(world) == before


@pytest.mark.parametrize("kind", ["memories", "notices"])
def test_another_users_id_in_the_api_is_refused_like_a_missing_one(
    world: Engine, dan, rows, kind: str
) -> None:  # type: ignore[no-untyped-def]
    client, csrf = dan
    verb = "delete" if kind == "memories" else "undo"
    theirs = rows["cara_row" if kind == "memories" else "cara_notice"]
    before = snapshot(world)
    headers = {"X-CSRF-Token": csrf}
    forged = client.post(f"/api/{kind}/{theirs}/{verb}", headers=headers)
    missing = client.post(f"/api/{kind}/99999/{verb}", headers=headers)
    assert forged.status_code == missing.status_code == 404
    assert forged.json() == missing.json() == {"ok": False, "error": "not found"}
    assert snapshot(world) == before


def test_the_page_and_the_api_show_only_the_users_own_rows_and_toasts(dan, rows) -> None:  # type: ignore[no-untyped-def]
    client, _ = dan
    page = client.get("/api/page").json()
    shown = [line["id"] for s in page["personas"] for line in s["lines"]]
    assert shown == [rows["dan_row"]]
    assert [n["id"] for n in page["notices"]] == [rows["dan_notice"]]
    html = client.get("/").text
    assert "runs marathons" not in html and "Dan owns a flat in Xuhui." in html


def test_a_user_id_in_the_stream_url_is_refused(dan) -> None:  # type: ignore[no-untyped-def]
    client, _ = dan
    r = client.get(f"/api/notices/stream?user_id={CARA}")
    assert r.status_code == 400 and "signed-in user" in r.json()["error"]


def test_a_users_own_deleting_works_through_the_same_route(world: Engine, dan, rows) -> None:  # type: ignore[no-untyped-def]
    """The refusals above are not a route that refuses everything."""
    client, csrf = dan
    r = client.post(f"/memories/{rows['dan_row']}/delete", data={"csrf": csrf})
    assert r.status_code == 200 and r.url.path == "/"
    assert rows["dan_row"] not in snapshot(world)["rows"]


def test_a_link_cannot_make_the_page_claim_something_happened(world: Engine, dan, rows) -> None:  # type: ignore[no-untyped-def]
    client, csrf = dan
    assert "Cleared" not in client.get("/?done=cleared&n=999").text
    after = client.post("/clear", data={"csrf": csrf})  # redirected to the page
    assert "Cleared: 1 line deleted." in after.text  # said once, after the real thing
    assert "Cleared" not in client.get("/").text


# --- CSRF: a write without the session's token changes nothing --------------------------------


@pytest.mark.parametrize("path", [a.path for a in ACTIONS])
@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_form_post_without_the_csrf_token_changes_nothing(
    world: Engine, dan, rows, path: str, token: str | None
) -> None:  # type: ignore[no-untyped-def]
    client, _ = dan
    form = {
        k: ("1" if v is True else "0" if v is False else v)
        for k, v in VALID_INPUT.get(path, {}).items()
    }
    if token:
        form["csrf"] = token
    before = snapshot(world)
    r = client.post(concrete(path, rows), data=form)
    assert r.status_code == 403
    assert snapshot(world) == before


@pytest.mark.parametrize("path", [a.path for a in ACTIONS])
def test_an_api_write_without_the_csrf_header_changes_nothing(
    world: Engine, dan, rows, path: str
) -> None:  # type: ignore[no-untyped-def]
    client, csrf = dan
    before = snapshot(world)
    body = VALID_INPUT.get(path, {})
    r = client.post("/api" + concrete(path, rows), json=body)
    assert r.status_code == 403 and "CSRF" in r.json()["error"]
    # the token in the body instead of the header does not count either
    r = client.post("/api" + concrete(path, rows), json={**body, "csrf": csrf})
    assert r.status_code == 403
    assert snapshot(world) == before
    # and with the header, the same request does its job
    assert client.post(
        "/api" + concrete(path, rows), json=body, headers={"X-CSRF-Token": csrf}
    ).json()["ok"]


def test_one_sessions_token_is_no_good_in_another_session(world: Engine, app, rows) -> None:  # type: ignore[no-untyped-def]
    dan_client, _ = signed_in(app, DAN)
    _, cara_csrf = signed_in(app, CARA)
    before = snapshot(world)
    r = dan_client.post("/api/clear", json={}, headers={"X-CSRF-Token": cara_csrf})
    assert r.status_code == 403 and snapshot(world) == before


# --- input the API does not expect ------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/switches/memory_on", {"on": "false"}),
        ("/api/switches/memory_on", {}),
        ("/api/note", {"note": 5}),
        ("/api/rooms", {"persona": ["warren"], "incognito": True}),
        ("/api/clear", {"persona": "warren", "everyone": True}),
        ("/api/clear", [1, 2]),
    ],
)
def test_ill_typed_api_input_is_a_clear_400_and_changes_nothing(
    world: Engine, dan, rows, path: str, body: object
) -> None:  # type: ignore[no-untyped-def]
    client, csrf = dan
    before = snapshot(world)
    r = client.post(path, json=body, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 400 and r.json()["error"]
    assert snapshot(world) == before


def test_a_401_char_note_through_the_api_is_refused_and_the_note_stays(world: Engine, dan) -> None:  # type: ignore[no-untyped-def]
    client, csrf = dan
    r = client.post("/api/note", json={"note": "x" * 401}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 422 and "401" in r.json()["error"] and "400" in r.json()["error"]
    assert page_model.manage_page(DAN).note == "Call me Dan."


# --- the session ---------------------------------------------------------------------------


def test_the_session_cookie_is_signed_httponly_and_samesite_strict(app) -> None:  # type: ignore[no-untyped-def]
    client = TestClient(app, base_url="http://127.0.0.1")
    r = client.get(f"/login?token={app.state.login_links.mint(DAN)}", follow_redirects=False)
    cookie = r.headers["set-cookie"].lower()
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "httponly" in cookie and "samesite=strict" in cookie


def _cookie(payload: dict, secret: str) -> str:
    data = base64.b64encode(json.dumps(payload).encode())
    return TimestampSigner(secret).sign(data).decode()


def _session_id(client: TestClient) -> str:
    """The session id a signed-in client's cookie carries (the payload is only signed)."""
    data = client.cookies[SESSION_COOKIE].split(".", 1)[0]
    return str(json.loads(base64.b64decode(data))["sid"])


@pytest.mark.parametrize("how", ["unsigned", "signed with another secret", "tampered"])
def test_a_forged_session_cookie_signs_no_one_in(app, rows, how: str) -> None:  # type: ignore[no-untyped-def]
    dan, _ = signed_in(app, DAN)
    payload = {"sid": _session_id(dan)}  # Dan's live session: only the signature is wrong
    client = TestClient(app, base_url="http://127.0.0.1")
    if how == "unsigned":
        value = base64.b64encode(json.dumps(payload).encode()).decode()
    elif how == "signed with another secret":
        value = _cookie(payload, "another secret of the same length, or longer..")
    else:
        real, _ = signed_in(app, CARA)
        signed = real.cookies[SESSION_COOKIE]
        data, rest = signed.split(".", 1)
        forged = json.loads(base64.b64decode(data))
        forged["sid"] = payload["sid"]
        value = base64.b64encode(json.dumps(forged).encode()).decode() + "." + rest
    client.cookies.set(SESSION_COOKIE, value)
    assert client.get("/api/page").status_code == 401
    assert client.get("/").status_code == 401
    assert client.post("/api/clear", json={}, headers={"X-CSRF-Token": "x"}).status_code == 401


def test_a_cookie_signed_with_the_servers_secret_is_the_control(app) -> None:  # type: ignore[no-untyped-def]
    """The forgery test's cookie format is the real one: with the right secret it works."""
    dan, _ = signed_in(app, DAN)
    client = TestClient(app, base_url="http://127.0.0.1")
    client.cookies.set(SESSION_COOKIE, _cookie({"sid": _session_id(dan)}, SECRET))
    assert client.get("/api/session").json()["user_id"] == DAN


def test_a_sign_in_link_works_once(app) -> None:  # type: ignore[no-untyped-def]
    token = app.state.login_links.mint(DAN)
    first = TestClient(app, base_url="http://127.0.0.1")
    assert first.get(f"/login?token={token}").status_code == 200
    second = TestClient(app, base_url="http://127.0.0.1")
    assert second.get(f"/login?token={token}").status_code == 403
    assert second.get("/api/session").status_code == 401


def test_every_response_carries_the_security_headers(dan) -> None:  # type: ignore[no-untyped-def]
    client, _ = dan
    for path in ("/", "/api/page", "/api/notices", "/static/app.js", "/clear", "/nowhere"):
        r = client.get(path)
        for name, value in SECURITY_HEADERS.items():
            assert r.headers.get(name) == value, (path, name)
    assert "script-src 'self'" in SECURITY_HEADERS["content-security-policy"]
    assert "unsafe-inline" not in SECURITY_HEADERS["content-security-policy"]


def test_the_page_has_no_inline_script_or_style_for_the_csp_to_block(dan) -> None:  # type: ignore[no-untyped-def]
    client, _ = dan
    html = client.get("/").text
    assert "<script>" not in html and "<style" not in html and " style=" not in html
    assert " on" + "click=" not in html


def test_a_request_for_another_host_name_is_refused(app) -> None:  # type: ignore[no-untyped-def]
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 gets nothing."""
    client = TestClient(app, base_url="http://evil.example")
    assert client.get("/api/page").status_code == 400


# --- the server process -----------------------------------------------------------------------


def _listening_addresses(port: int) -> set[str]:
    """Local addresses listening on `port`, from the kernel's own table."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, _, state = line.split()[1:4]
            addr, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":  # LISTEN
                found.add(addr)
    return found


@pytest.mark.processes  # a `memory-worker serve`
def test_serve_binds_only_loopback_by_default(world: Engine) -> None:
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp on this system to read listening sockets from")
    with serve(settings_mod.current()) as served:
        port = int(served.base_url.rsplit(":", 1)[1])
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else


@pytest.mark.processes  # a `memory-worker serve`
def test_serve_with_a_user_prints_a_one_time_link_that_signs_them_in(world: Engine) -> None:
    import httpx

    with serve(settings_mod.current(), "--user", str(DAN)) as served:
        assert served.login_url and served.login_url.startswith(served.base_url + "/login?token=")
        with httpx.Client() as browser:
            page = browser.get(served.login_url, follow_redirects=True)
            assert page.status_code == 200 and "Signed in as u:42" in page.text
            again = httpx.get(served.login_url)
            assert again.status_code == 403


def test_serve_refuses_a_short_secret_and_an_unknown_user_by_name(
    world: Engine, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memory_worker import cli

    monkeypatch.setenv("MW_WEB_SECRET", "short")
    settings_mod.configure(settings_mod.current().with_(web_secret="short"))
    assert cli.main(["serve", "--user", str(DAN)]) == 2
    assert "MW_WEB_SECRET" in capsys.readouterr().err
    settings_mod.configure(settings_mod.current().with_(web_secret=None))
    assert cli.main(["serve", "--user", "999"]) == 2
    assert "unknown user 999" in capsys.readouterr().err
