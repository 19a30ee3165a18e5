"""A bug on the page is a 500 with a log line, never a 404, a sign-out or its message shown.

The app catches the project's own errors by name (`NotFound`, `UnknownUser`, `BadRequest`,
`NoteTooLong`) and nothing else, so a builtin raised by a bug falls through to the guard's 500
(docs/design.md §10.12). Each test plants a builtin in a controls or page-model function a
route calls; the store, the session and the app are real.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from memory_worker import controls
from memory_worker.web import page_model
from memory_worker.web.app import create_app
from memory_worker.web.security import CSRF_FIELD
from tests.scenes import DAN
from tests.web import test_web_security

pytestmark = pytest.mark.store

SECRET = "s" * 48
HIDDEN = "detail only the code knows"  # a bug's message: never in an answer or a log line

world = test_web_security.world


@pytest.fixture
def dan(world: Engine) -> Iterator[tuple[TestClient, str]]:
    app = create_app(secret_key=SECRET)
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    token = app.state.login_links.mint(DAN)
    assert client.get(f"/login?token={token}").status_code == 200
    with client:
        yield client, client.get("/api/session").json()["csrf_token"]


def planted(error: type[Exception]) -> Callable[..., object]:
    def bug(*args: object, **kwargs: object) -> object:
        raise error(HIDDEN)

    return bug


# (the module and function the route calls, how to call the route with Dan's session)
ROUTES = {
    "GET /": (page_model, "manage_page", lambda c, csrf: c.get("/")),
    "GET /api/page": (page_model, "manage_page", lambda c, csrf: c.get("/api/page")),
    "POST /api/note": (
        controls,
        "set_note",
        lambda c, csrf: c.post("/api/note", json={"note": "x"}, headers={"X-CSRF-Token": csrf}),
    ),
    "POST /note": (
        controls,
        "set_note",
        lambda c, csrf: c.post("/note", data={"note": "x", CSRF_FIELD: csrf}),
    ),
    "POST /api/personas/warren/forget_me": (
        controls,
        "mute",
        lambda c, csrf: c.post(
            "/api/personas/warren/forget_me", json={"on": True}, headers={"X-CSRF-Token": csrf}
        ),
    ),
    "GET /api/notices": (page_model, "rail", lambda c, csrf: c.get("/api/notices")),
}


@pytest.mark.parametrize("error", [KeyError, LookupError, ValueError, TypeError, PermissionError])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_builtin_from_a_bug_in_a_handler_is_a_500_with_a_log_line_and_no_sign_out(
    dan: tuple[TestClient, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    route: str,
    error: type[Exception],
) -> None:
    client, csrf = dan
    module, function, call = ROUTES[route]
    monkeypatch.setattr(module, function, planted(error))
    with caplog.at_level(logging.ERROR, logger="memory_worker.web.guard"):
        r = call(client, csrf)
    assert r.status_code == 500, (r.status_code, r.text[:200])
    assert HIDDEN not in r.text
    failed = [rec for rec in caplog.records if error.__name__ in rec.getMessage()]
    assert failed, [rec.getMessage() for rec in caplog.records]
    assert not any(HIDDEN in rec.getMessage() for rec in caplog.records)
    monkeypatch.undo()
    assert client.get("/api/session").status_code == 200  # not signed out by the bug


def test_what_the_code_refuses_on_purpose_keeps_its_answer(dan: tuple[TestClient, str]) -> None:
    """The other side: the project's own errors still answer 404, 400 and 422."""
    client, csrf = dan
    headers = {"X-CSRF-Token": csrf}
    r = client.post("/api/memories/999999/delete", headers=headers)
    assert (r.status_code, r.json()["error"]) == (404, "not found")
    r = client.post("/api/personas/nobody/forget_me", json={"on": True}, headers=headers)
    assert r.status_code == 404
    r = client.post("/api/note", json=["x"], headers=headers)
    assert r.status_code == 400 and "JSON object" in r.json()["error"]
    r = client.get("/api/notices?after=x")
    assert r.status_code == 400 and "whole number" in r.json()["error"]
    r = client.post("/api/note", json={"note": "x" * 401}, headers=headers)
    assert r.status_code == 422
