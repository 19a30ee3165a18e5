"""The page under abuse: bounded bodies, nesting, crashes, foreign origins, and a
sign-out that ends the session for every copy of the cookie.

The body tests speak raw HTTP to a real `memory-worker serve` (uvicorn): a test client hands
the whole body over at once and could not show a server refusing before it has read it.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
import uvicorn
from sqlalchemy import Engine, func, select
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from memory_worker.core import settings as settings_mod
from memory_worker.core import tables as t
from memory_worker.core.constants import WEB_JSON_MAX_DEPTH
from memory_worker.web import page_model
from memory_worker.web.app import PageApp, create_app
from memory_worker.web.security import SECURITY_HEADERS, SESSION_COOKIE, Sessions
from memory_worker.web.serve import head_deadline_protocol
from tests.scenes import CARA, DAN
from tests.web import test_web_security
from tests.web.test_web_security import snapshot
from tests.web_server import Served, serve

pytestmark = [pytest.mark.store, pytest.mark.processes]  # a `memory-worker serve` a test

SECRET = "s" * 48
BASE = "http://127.0.0.1"
ANSWER_TIMEOUT_S = 20.0  # a refusal comes at once; a server reading 1 GB first never answers

world = test_web_security.world  # Dan and Cara with their rooms; Dan has a note


@pytest.fixture
def app(world: Engine) -> PageApp:
    return create_app(secret_key=SECRET)


def sign_in(app: PageApp, user_id: int) -> tuple[TestClient, str]:
    client = TestClient(app, base_url=BASE, raise_server_exceptions=False)
    assert client.get(f"/login?token={app.state.login_links.mint(user_id)}").status_code == 200
    return client, client.get("/api/session").json()["csrf_token"]


@pytest.fixture
def served(world: Engine) -> Iterator[Served]:
    with serve(settings_mod.current(), "--user", str(DAN)) as s:
        yield s


def _signed_in_headers(served: Served) -> str:
    """Dan's cookie and CSRF token as raw header lines, through the printed sign-in link."""
    import httpx

    assert served.login_url is not None
    with httpx.Client() as browser:
        browser.get(served.login_url, follow_redirects=True)
        csrf = browser.get(served.base_url + "/api/session").json()["csrf_token"]
        cookie = browser.cookies[SESSION_COOKIE]
    return f"Cookie: {SESSION_COOKIE}={cookie}\r\nX-CSRF-Token: {csrf}\r\n"


# --- raw HTTP against the real server --------------------------------------------------------


def _connect(served: Served) -> socket.socket:
    parts = urlsplit(served.base_url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=ANSWER_TIMEOUT_S)
    return sock


def _head(path: str, port: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{extra}\r\n"
    ).encode()


def _status(sock: socket.socket) -> tuple[int, str]:
    """The answer's status and head (raises socket.timeout when the server does not answer)."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    head = got.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    return int(head.split()[1]), head.lower()


def test_a_huge_declared_body_is_a_413_before_one_byte_is_read(served: Served) -> None:
    """The first attack measured: a signed-out POST /logout of a 1 GB form. The server
    answers from the headers alone; it never waits for (or holds) the body."""
    port = served.base_url.rsplit(":", 1)[1]
    for path in ("/logout", "/api/note", "/note"):
        with _connect(served) as sock:
            sock.sendall(_head(path, port, "Content-Length: 1000000000\r\n"))
            status, head = _status(sock)  # no byte of the body was sent
        assert status == 413, path
        assert "content-security-policy" in head, path


@pytest.mark.parametrize(("path", "status"), [("/logout", 303), ("/note", 401), ("/api/note", 401)])
def test_a_signed_out_write_is_answered_without_its_body_being_read(
    served: Served, path: str, status: int
) -> None:
    """The session is checked before a form is read: a body that never comes is not waited on
    (waiting would end in the body's 408 instead)."""
    port = served.base_url.rsplit(":", 1)[1]
    with _connect(served) as sock:
        sock.sendall(_head(path, port, "Content-Length: 1000\r\n"))  # the body never comes
        assert _status(sock)[0] == status


def test_a_chunked_body_is_a_413_as_soon_as_it_passes_the_limit(served: Served) -> None:
    port = served.base_url.rsplit(":", 1)[1]
    limit = settings_mod.current().web_max_body_bytes
    chunk = b"a=" + b"x" * 8190
    offered = 100 * len(chunk)  # ~800 KB on offer, 50 times the limit
    sent = 0
    signed_in = _signed_in_headers(served)  # a signed-out body is never read at all
    with _connect(served) as sock:
        sock.sendall(_head("/note", port, "Transfer-Encoding: chunked\r\n" + signed_in))
        try:
            while sent < offered:
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
                sock.settimeout(0.05)
                try:
                    if sock.recv(1, socket.MSG_PEEK):
                        break  # the server answered mid-body
                except TimeoutError:
                    pass
                finally:
                    sock.settimeout(ANSWER_TIMEOUT_S)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up on the rest of the body: it read no more of it
        else:
            if sent >= offered:
                sock.sendall(b"0\r\n\r\n")
        status, _ = _status(sock)
    assert status == 413
    assert sent < offered, "the server read the whole body before it answered"
    assert sent <= limit + 4 * len(chunk)  # refused within a few chunks of the limit


@contextmanager
def uvicorn_serving(app: PageApp, **config: Any) -> Iterator[int]:
    """The app under a real uvicorn in this process (its knobs turned for a test): the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started and thread.is_alive():
            time.sleep(0.01)
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_a_trickled_body_is_a_408_once_its_time_is_up(world: Engine) -> None:
    """A slow body: headers, then a byte now and then. The app stops waiting on it."""
    app = create_app(secret_key=SECRET)
    app.body_timeout_s = 0.5
    client, csrf = sign_in(app, DAN)  # a signed-out body is never read, so never waited on
    cookie = f"Cookie: {SESSION_COOKIE}={client.cookies[SESSION_COOKIE]}\r\n"
    with uvicorn_serving(app) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as c:
            head = _head(
                "/api/note", str(port), f"Content-Length: 100\r\n{cookie}X-CSRF-Token: {csrf}\r\n"
            )
            c.sendall(head + b"a")
            status, answer = _status(c)
    assert status == 408 and "content-security-policy" in answer


def test_a_request_head_trickled_in_is_hung_up_on(world: Engine) -> None:
    """A slowloris never finishes its headers: serve's protocol closes it, before and between
    requests, so such clients cannot hold the connections for as long as they like."""
    app = create_app(secret_key=SECRET)
    with uvicorn_serving(app, http=head_deadline_protocol(0.5)) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as c:
            c.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # and no more
            assert c.recv(1024) == b""  # closed, unanswered
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as c:
            c.sendall(b"GET /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _status(c)[0] == 401  # a whole head is answered, and the next one waited for
            c.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            rest = c.recv(65536)
            while rest:
                rest = c.recv(65536)  # what is left of the 401, then the close


# --- nesting and crashes ---------------------------------------------------------------------


def test_deeply_nested_json_is_a_400_with_the_headers_and_changes_nothing(
    world: Engine, app: PageApp
) -> None:
    client, csrf = sign_in(app, DAN)
    before = snapshot(world)
    headers = {"X-CSRF-Token": csrf, "Content-Type": "application/json"}
    r = client.post("/api/note", content="[" * 10_000, headers=headers)
    assert r.status_code == 400 and f"{WEB_JSON_MAX_DEPTH} levels" in r.json()["error"]
    for name, value in SECURITY_HEADERS.items():
        assert r.headers.get(name) == value, name
    # the issue's own body, 200,000 brackets: over the size limit before its depth counts
    r = client.post("/api/note", content="[" * 200_000, headers=headers)
    assert r.status_code == 413 and r.headers["content-security-policy"]
    # nesting within the limit is still just JSON: a note in a list is the wrong type, a 400
    r = client.post("/api/note", json=[[{"note": "x"}]], headers={"X-CSRF-Token": csrf})
    assert r.status_code == 400 and "JSON object" in r.json()["error"]
    assert snapshot(world) == before


def test_a_crash_is_a_plain_500_with_the_headers_and_no_trace_anywhere(
    world: Engine, app: PageApp, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(request: Request) -> Response:
        raise RuntimeError("secret detail of the crash")

    app.router.routes.append(Route("/boom", boom))
    client = TestClient(app, base_url=BASE, raise_server_exceptions=False)
    with caplog.at_level(logging.DEBUG):
        r = client.get("/boom")
    assert r.status_code == 500
    for name, value in SECURITY_HEADERS.items():
        assert r.headers.get(name) == value, name
    assert "secret detail" not in r.text and "Traceback" not in r.text
    logged = [rec for rec in caplog.records if "boom" in rec.getMessage()]
    assert logged and all(rec.exc_info is None for rec in logged)
    assert not any("secret detail" in rec.getMessage() for rec in caplog.records)


# --- origin -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/page"},
        {"Origin": "http://127.0.0.1:9999"},  # another port is another origin
    ],
)
def test_a_write_from_another_origin_changes_nothing_even_with_the_csrf_token(
    world: Engine, app: PageApp, sent: dict[str, str]
) -> None:
    client, csrf = sign_in(app, DAN)
    before = snapshot(world)
    r = client.post("/api/clear", json={}, headers={"X-CSRF-Token": csrf, **sent})
    assert r.status_code == 403 and "origin" in r.json()["error"]
    r = client.post("/clear", data={"csrf": csrf}, headers=sent, follow_redirects=False)
    assert r.status_code == 403
    assert snapshot(world) == before
    # the control: the page's own origin writes
    r = client.post(
        "/api/note", json={"note": "Mine."}, headers={"X-CSRF-Token": csrf, "Origin": BASE}
    )
    assert r.json()["ok"] and page_model.manage_page(DAN).note == "Mine."


# --- sign-out ends the session -----------------------------------------------------------------


def _copy(app: PageApp, client: TestClient) -> TestClient:
    """Another browser holding a copy of the client's cookie (a thief, or a second tab)."""
    thief = TestClient(app, base_url=BASE)
    thief.cookies.set(SESSION_COOKIE, client.cookies[SESSION_COOKIE])
    return thief


def test_a_cookie_copied_before_sign_out_no_longer_works_after_it(
    world: Engine, app: PageApp
) -> None:
    dan, csrf = sign_in(app, DAN)
    thief = _copy(app, dan)
    assert thief.get("/api/session").status_code == 200  # the copy works while signed in
    assert dan.post("/logout", data={"csrf": csrf}).status_code == 401  # back on the sign-in
    assert thief.get("/api/session").status_code == 401
    assert thief.get("/api/page").status_code == 401
    before = snapshot(world)
    assert thief.post("/api/clear", json={}, headers={"X-CSRF-Token": csrf}).status_code == 401
    assert snapshot(world) == before


def test_sign_out_everywhere_ends_every_session_of_the_user_and_no_one_elses(app: PageApp) -> None:
    laptop, csrf = sign_in(app, DAN)
    phone, _ = sign_in(app, DAN)
    cara, _ = sign_in(app, CARA)
    assert laptop.post("/logout", data={"csrf": csrf, "everywhere": "1"}).status_code == 401
    assert phone.get("/api/session").status_code == 401
    assert cara.get("/api/session").json()["user_id"] == CARA


def test_a_plain_sign_out_leaves_the_users_other_sessions(app: PageApp) -> None:
    laptop, csrf = sign_in(app, DAN)
    phone, _ = sign_in(app, DAN)
    laptop.post("/logout", data={"csrf": csrf})
    assert phone.get("/api/session").json()["user_id"] == DAN


def test_a_sign_out_without_the_csrf_token_ends_nothing(app: PageApp) -> None:
    dan, _ = sign_in(app, DAN)
    assert dan.post("/logout", data={"csrf": "wrong"}).status_code == 200  # still the page
    assert dan.get("/api/session").json()["user_id"] == DAN


def test_an_expired_session_signs_no_one_in(app: PageApp) -> None:
    app.state.sessions = Sessions(SECRET, max_age_s=0)  # over as soon as it starts
    client = TestClient(app, base_url=BASE)
    r = client.get(f"/login?token={app.state.login_links.mint(DAN)}")
    assert r.status_code == 401 and client.get("/api/session").status_code == 401


def test_a_new_web_secret_ends_every_session(world: Engine, app: PageApp) -> None:
    """Even a cookie re-signed with the new secret names no session: the server does not hold
    sessions minted under the old one, and `serve` deletes them when it starts."""
    from itsdangerous import TimestampSigner

    dan, _ = sign_in(app, DAN)
    data = dan.cookies[SESSION_COOKIE].split(".", 1)[0]
    new_secret = "n" * 48
    rotated = create_app(secret_key=new_secret)
    client = TestClient(rotated, base_url=BASE)
    client.cookies.set(SESSION_COOKIE, TimestampSigner(new_secret).sign(data).decode())
    assert client.get("/api/session").status_code == 401
    assert Sessions(new_secret).end_stale() == 1
    with world.connect() as conn:
        assert conn.execute(select(func.count()).select_from(t.web_sessions)).scalar() == 0
    assert json.loads(base64.b64decode(data))  # the payload held a session id, nothing else


def test_an_open_rail_stream_ends_when_its_session_is_signed_out(world: Engine) -> None:
    """A stream opened before sign-out (by a copy of the cookie, say) does not outlive it."""
    import httpx

    with (
        serve(settings_mod.current(), "--user", str(DAN), "--rail-poll-s", "0.2") as served,
        httpx.Client() as browser,
    ):
        assert served.login_url is not None
        browser.get(served.login_url, follow_redirects=True)
        csrf = browser.get(served.base_url + "/api/session").json()["csrf_token"]
        ended = threading.Event()
        listening = threading.Event()

        def read() -> None:
            url = served.base_url + "/api/notices/stream"
            with httpx.stream("GET", url, cookies=browser.cookies, timeout=None) as r:
                for line in r.iter_lines():
                    if line == ": listening":
                        listening.set()
            ended.set()

        threading.Thread(target=read, daemon=True).start()
        assert listening.wait(ANSWER_TIMEOUT_S)
        browser.post(served.base_url + "/logout", data={"csrf": csrf})
        assert ended.wait(ANSWER_TIMEOUT_S), "the stream went on after sign-out"
