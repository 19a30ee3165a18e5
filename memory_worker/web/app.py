"""The Starlette app: the page, the API beside it, the rail's stream, the sign-in link.

Routes (every write is POST, under / for the page's forms and under /api/ for JSON):

    GET  /                          the page (signed out: how to sign in)
    GET  /login?token=…             a one-time sign-in link → the page
    POST /logout                    (with everywhere=1: every session of the user, everywhere)
    GET  /clear[?persona=P]         "are you sure?" before clearing
    GET  /api/session               who is signed in, and the CSRF token for API writes
    GET  /api/page                  the page as JSON
    GET  /api/notices[?after=N]     the rail as JSON
    GET  /api/notices/stream        the rail, live (Server-Sent Events)
    GET  /api/export[?format=md]    everything about the user, streamed (the CSRF header too)
    POST /export                    the same, from the page's button without JavaScript
    POST [/api]/notices/{id}/undo · /memories/{id}/delete · /clear · /note
         · /switches/memory_on · /personas/{slug}/forget_me · /personas/{slug}/follow
         · /rooms

Missing and not-yours get one answer (404 "not found"), so an id reveals nothing. Before any
route, `guard.Guard` bounds the body, refuses a write from another origin and puts the security
headers on every answer; every route checks the session before it reads a body.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from memory_worker.core import settings as settings_mod
from memory_worker.core import toasts
from memory_worker.core.constants import MEMORY_NOTE_MAX_CHARS, RAIL_POLL_S, WEB_BODY_TIMEOUT_S
from memory_worker.core.errors import (
    BadCursor,
    BadRequest,
    BadSearch,
    ListChanged,
    NoteTooLong,
    NotFound,
    Refused,
    UnknownUser,
)
from memory_worker.core.numbers import whole_number
from memory_worker.core.rows import now_iso
from memory_worker.storage import store, users
from memory_worker.web import export, guard, page_model, rail, security
from memory_worker.web.actions import ACTIONS, Action, form_input

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
NOT_FOUND = "not found"  # missing and not-yours alike
LIST_CHANGED = (
    "The lines changed while you scrolled (one was closed or reopened): "
    "start again from the top to see each once."
)

templates = Jinja2Templates(directory=str(HERE / "templates"))

Endpoint = Callable[[Request], Awaitable[Response]]  # a Starlette route handler


# --- what the page shows ----------------------------------------------------------------------


PAGE_LINES = 50  # ours: the lines a page shows at first, and each scroll adds


def page_data(
    user_id: int, cursor: str | None = None, query: str | None = None, limit: int = PAGE_LINES
) -> dict[str, Any]:
    """Everything on the page, as plain data: the template and GET /api/page both use it.
    One page of lines (`page_model.page_lines`: `cursor`, `query`), every persona's counts."""
    page = page_model.manage_page(user_id, cursor=cursor, query=query or None, limit=limit)
    evidence = page_model.evidence(user_id, page)
    names = page_model.persona_names()
    rooms = page_model.rooms_of(user_id)
    texts = [line.text for s in page.personas for line in s.lines]
    with store.engine().connect() as conn:
        people = users.user_names(conn, sorted(toasts.mentioned(texts)))
    # Forget-me switches: personas that remember the user, that the user muted, or that
    # share a room with them.
    known = {s.persona for s in page.personas} | set(page.muted)
    known |= {p for r in rooms for p in r.personas}
    return {
        "user_id": user_id,
        "note": page.note,
        "note_limit": MEMORY_NOTE_MAX_CHARS,
        "memory_on": page.memory_on,
        "personas": [
            {
                **asdict(s),
                "forget_me": s.persona in page.muted,
                "lines": [
                    {
                        **asdict(line),
                        "shown": toasts.named(line.text, people) + ".",
                        "evidence_lines": [asdict(e) for e in evidence.get(line.id, [])],
                    }
                    for line in s.lines
                ],
            }
            for s in page.personas
        ],
        "group_scope": page.group_scope,
        "switches": [
            {
                "persona": slug,
                "name": names.get(slug, slug),
                "forget_me": slug in page.muted,
                "follow_switch": slug not in page.private_with,
                "follows_into_groups": page.follows_into_groups(slug),
            }
            for slug in sorted(known)
        ],
        "rooms": [{**asdict(r), "names": [names.get(p, p) for p in r.personas]} for r in rooms],
        "persona_names": names,
        "notices": [asdict(n) for n in page_model.rail(user_id)],
        "next_cursor": page.next_cursor,
        "query": query or "",
    }


def _limit(request: Request) -> int:
    """The page's `limit` from the query string: BadRequest for one that is not 1..200."""
    given = request.query_params.get("limit", str(PAGE_LINES))
    return whole_number(given, "limit", 1, page_model.PAGE_LINES_MAX)


def _page(request: Request, user_id: int, limit: int = PAGE_LINES) -> dict[str, Any]:
    """`page_data` for the request's `cursor` and `q` (a search): the cursor must be one this
    server signed for this user and search (else BadCursor), and the next one is signed."""
    key: bytes = request.app.state.cursor_key
    query = request.query_params.get("q")
    cursor = security.open_cursor(key, user_id, query, request.query_params.get("cursor"))
    data = page_data(user_id, cursor, query, limit)
    if data["next_cursor"] is not None:
        data["next_cursor"] = security.sign_cursor(key, user_id, query, data["next_cursor"])
    return data


def _render_page(
    request: Request,
    user_id: int,
    *,
    status: int = 200,
    note_error: str | None = None,
    note_draft: str | None = None,
) -> Response:
    data = _page(request, user_id)
    done, count = request.session.pop("done", None) or (None, None)
    context = {
        **data,
        "csrf": security.csrf_token(request),
        "done": done,
        "count": count,
        "note_error": note_error,
        "note_draft": (data["note"] or "") if note_draft is None else note_draft,
        "last_notice": max((n["id"] for n in data["notices"]), default=0),
    }
    return templates.TemplateResponse(request, "page.html", context, status_code=status)


def _signed_out(request: Request, status: int = 401) -> Response:
    return templates.TemplateResponse(request, "signed_out.html", {}, status_code=status)


def _error_page(request: Request, status: int, message: str) -> Response:
    return templates.TemplateResponse(
        request, "error.html", {"status": status, "message": message}, status_code=status
    )


# --- the page's GET routes --------------------------------------------------------------------


async def favicon(request: Request) -> Response:
    """The page's icon, where a browser looks for one without reading the page's link."""
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


async def page(request: Request) -> Response:
    uid = await security.signed_in_user(request)
    if uid is None:
        return _signed_out(request)
    try:
        return await run_in_threadpool(_render_page, request, uid)
    except UnknownUser:  # the user is gone from the store
        await security.sign_out(request, everywhere=True)
        return _signed_out(request)
    except BadCursor:  # a cursor the page never gave
        return _error_page(request, 400, "This page link is not one the page gave.")
    except BadSearch as e:
        return _error_page(request, 400, f"Not searched: {e}.")
    except BadRequest as e:
        return _error_page(request, 400, f"{str(e)[:1].upper()}{str(e)[1:]}.")
    except ListChanged:
        return _error_page(request, 409, LIST_CHANGED)


async def login(request: Request) -> Response:
    links: security.LoginLinks = request.app.state.login_links
    uid = links.redeem(request.query_params.get("token", ""))
    if uid is None:
        return _error_page(request, 403, "This sign-in link was used already or has expired.")
    await security.sign_in(request, uid)
    return RedirectResponse("/", status_code=303)


async def logout(request: Request) -> Response:
    if await security.current(request) is None:  # no session: nothing to read, nothing to end
        return RedirectResponse("/", status_code=303)
    form = await request.form()
    if security.csrf_ok(request, form.get(security.CSRF_FIELD)):
        await security.sign_out(request, everywhere=form.get("everywhere") == "1")
    return RedirectResponse("/", status_code=303)


async def confirm_clear(request: Request) -> Response:
    uid = await security.signed_in_user(request)
    if uid is None:
        return _signed_out(request)
    persona = request.query_params.get("persona") or None
    data = await run_in_threadpool(page_data, uid)
    sections = [s for s in data["personas"] if persona is None or s["persona"] == persona]
    count = sum(s["open_count"] + s["closed_count"] for s in sections)
    name = data["persona_names"].get(persona, persona) if persona else None
    return templates.TemplateResponse(
        request,
        "confirm_clear.html",
        {"persona": persona, "name": name, "count": count, "csrf": security.csrf_token(request)},
    )


# --- the writes: one handler for the form, one for the API, per action ------------------------


def _run(action: Action, user_id: int, path: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
    body = action.input.model_validate(raw)
    return action.run(user_id, path, body)


async def _signed_form(request: Request) -> tuple[int, dict[str, str]] | Response:
    """The signed-in user and the page's form they posted with its CSRF token; else the
    page's answer (signed out, or an expired form). The session is checked before the body
    is read."""
    uid = await security.signed_in_user(request)
    if uid is None:
        return _signed_out(request)
    form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    if not security.csrf_ok(request, form.get(security.CSRF_FIELD)):
        return _error_page(request, 403, "This form has expired. Reload the page and retry.")
    return uid, form


def _html_write(action: Action) -> Endpoint:
    async def handler(request: Request) -> Response:
        signed = await _signed_form(request)
        if isinstance(signed, Response):
            return signed
        uid, form = signed
        try:
            raw = form_input(action, form)
            result = await run_in_threadpool(_run, action, uid, dict(request.path_params), raw)
        except (NotFound, UnknownUser):
            return _error_page(request, 404, "Not found.")
        except NoteTooLong as e:
            return await run_in_threadpool(
                _render_page, request, uid, status=422, note_error=_note_refusal(e),
                note_draft=form.get("note", ""),
            )  # fmt: skip
        except (ValidationError, BadRequest) as e:
            return _error_page(request, 400, _plain(e))
        # What the page says next rides in the signed session, not the URL: a link cannot
        # make the page claim something happened.
        request.session["done"] = [action.done, result.get("deleted")]
        return RedirectResponse(f"/#{action.anchor}", status_code=303)

    return handler


def _api_write(action: Action) -> Endpoint:
    async def handler(request: Request) -> Response:
        uid = await security.signed_in_user(request)
        if uid is None:
            return _json_error(401, "not signed in")
        if not security.csrf_ok(request, request.headers.get(security.CSRF_HEADER)):
            return _json_error(403, "missing or wrong CSRF token (X-CSRF-Token)")
        try:
            raw = await _json_body(request, action)
            result = await run_in_threadpool(_run, action, uid, dict(request.path_params), raw)
        except (NotFound, UnknownUser):
            return _json_error(404, NOT_FOUND)
        except NoteTooLong as e:
            return _json_error(422, _note_refusal(e))
        except (ValidationError, BadRequest) as e:
            return _json_error(400, _plain(e))
        return JSONResponse({"ok": True, **result})

    return handler


async def _json_body(request: Request, action: Action) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    if "application/json" not in request.headers.get("content-type", ""):
        raise BadRequest("send the body as JSON (Content-Type: application/json)")
    body = guard.parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _note_refusal(e: NoteTooLong) -> str:
    return (
        f"Not saved: the note is {e.length} characters; the limit is {e.limit}. "
        "Your saved note is unchanged."
    )


def _plain(e: Exception) -> str:
    if isinstance(e, ValidationError):
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return f"{where}: {first['msg']}"
    return str(e)


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status)


# --- the API's reads ---------------------------------------------------------------------------


async def api_session(request: Request) -> Response:
    uid = await security.signed_in_user(request)
    if uid is None:
        return _json_error(401, "not signed in")
    return JSONResponse({"user_id": uid, "csrf_token": security.csrf_token(request)})


async def api_page(request: Request) -> Response:
    uid = await security.signed_in_user(request)
    if uid is None:
        return _json_error(401, "not signed in")
    try:
        limit = _limit(request)
        return JSONResponse(await run_in_threadpool(_page, request, uid, limit))
    except UnknownUser:
        return _json_error(404, NOT_FOUND)
    except BadRequest as e:  # a cursor, limit or search the page never gives
        return _json_error(400, _plain(e))
    except ListChanged:
        return JSONResponse({"ok": False, "error": LIST_CHANGED, "changed": True}, 409)


async def api_notices(request: Request) -> Response:
    uid = await security.signed_in_user(request)
    if uid is None:
        return _json_error(401, "not signed in")
    try:
        after = rail.after_id(request)
    except BadRequest as e:
        return _json_error(400, str(e))
    found = await run_in_threadpool(page_model.rail, uid, after)
    return JSONResponse({"notices": [asdict(n) for n in found]})


# --- the export --------------------------------------------------------------------------------


async def api_export(request: Request) -> Response:
    """GET /api/export[?format=json|md]: needs the session and its CSRF token (the header), as
    a write does — it hands over everything about the human at once."""
    uid = await security.signed_in_user(request)
    if uid is None:
        return _json_error(401, "not signed in")
    if not security.csrf_ok(request, request.headers.get(security.CSRF_HEADER)):
        return _json_error(403, "missing or wrong CSRF token (X-CSRF-Token)")
    return await _export(request, uid, request.query_params.get("format", "json"))


async def form_export(request: Request) -> Response:
    """POST /export: the page's button without JavaScript (the `csrf` and `format` fields)."""
    signed = await _signed_form(request)
    if isinstance(signed, Response):
        return signed
    uid, form = signed
    return await _export(request, uid, form.get("format", "json"), page=True)


async def _export(request: Request, uid: int, fmt: str, *, page: bool = False) -> Response:
    """The export as a download; a refusal as JSON, or for the page's form (`page`) as a page."""

    def refused(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        if page:
            answer = _error_page(request, status, f"{message[:1].upper()}{message[1:]}.")
        else:
            answer = _json_error(status, message)
        answer.headers.update(headers or {})
        return answer

    if fmt not in export.FORMATS:
        return refused(400, f"format must be one of {', '.join(export.FORMATS)}")
    wait = request.app.state.exports.take(uid)
    if wait is not None:
        log.info("export refused: user %d, too many in %.0f s", uid, export.EXPORT_WINDOW_S)
        retry = {"retry-after": str(int(wait) + 1)}
        return refused(429, "too many exports: try again in a few minutes", retry)
    try:
        head = await run_in_threadpool(page_data, uid, None, None, 1)
    except UnknownUser:
        return refused(404, NOT_FOUND)
    now = now_iso()
    name = export.filename(uid, fmt, now[:10])
    headers = {
        "content-disposition": f'attachment; filename="{name}"',
        "x-export-lines": str(export.expected_lines(head)),
    }
    return StreamingResponse(
        export.document(uid, fmt, head, now), media_type=export.FORMATS[fmt][0], headers=headers
    )


# --- the app ---------------------------------------------------------------------------------


class PageApp(Starlette):
    """Starlette with `guard.Guard` outside everything, Starlette's own error layer included:
    that layer answers a crash before any user middleware sees it, without our headers."""

    max_body_bytes: int = 16_384
    body_timeout_s: float = WEB_BODY_TIMEOUT_S

    def build_middleware_stack(self) -> ASGIApp:
        return guard.Guard(
            super().build_middleware_stack(),
            max_body_bytes=self.max_body_bytes,
            body_timeout_s=self.body_timeout_s,
        )


def create_app(
    *,
    secret_key: str,
    login_links: security.LoginLinks | None = None,
    redis_url: str | None = None,
    allowed_hosts: list[str] | None = None,
    rail_poll_s: float = RAIL_POLL_S,
    max_body_bytes: int | None = None,
) -> PageApp:
    """The app. `redis_url` is where toasts are announced (None: the rail polls the store);
    `max_body_bytes` defaults to MW_WEB_MAX_BODY_BYTES."""
    routes: list[Route | Mount] = [
        Route("/", page),
        Route("/login", login),
        Route("/logout", logout, methods=["POST"]),
        Route("/clear", confirm_clear, methods=["GET"]),
        Route("/api/session", api_session),
        Route("/api/page", api_page),
        Route("/api/notices", api_notices),
        Route("/api/notices/stream", rail.stream),
        Route("/api/export", api_export),
        Route("/export", form_export, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        Route("/favicon.ico", favicon),  # asked for by browsers that ignore the page's link
    ]
    for action in ACTIONS:
        routes.append(Route(action.path, _html_write(action), methods=["POST"]))
        routes.append(Route("/api" + action.path, _api_write(action), methods=["POST"]))
    app = PageApp(
        routes=routes,
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts or LOOPBACK_HOSTS),
            Middleware(
                SessionMiddleware,
                secret_key=secret_key,
                session_cookie=security.SESSION_COOKIE,
                max_age=security.SESSION_MAX_AGE_S,
                same_site="strict",
                https_only=False,  # loopback http; put TLS in front before exposing it
            ),
        ],
        exception_handlers={Refused: guard.on_refused},
    )
    app.max_body_bytes = (
        settings_mod.current().web_max_body_bytes if max_body_bytes is None else max_body_bytes
    )
    app.state.login_links = login_links or security.LoginLinks()
    app.state.sessions = security.Sessions(secret_key)
    app.state.cursor_key = security.cursor_key(secret_key)
    app.state.exports = export.ExportLimiter()
    app.state.redis_url = redis_url
    app.state.rail_poll_s = rail_poll_s
    return app
