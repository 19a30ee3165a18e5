"""The rail, live: new toasts as Server-Sent Events, without a reload.

The stream serves only the signed-in user's toasts, read from the store through
`page_model.rail` (which filters by user). The user's Redis channel (`toast_bus`) is a
nudge to read now; without Redis, or between nudges, the store is read every few seconds
(`serve --rail-poll-s`, default `constants.RAIL_POLL_S`) — pub/sub may drop a message, the
store never does. A channel message names ids only and is never
trusted for what to show: a message naming another user's notice shows nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from memory_worker.controls import checks
from memory_worker.core.errors import BadRequest
from memory_worker.core.numbers import whole_number
from memory_worker.ops import toast_bus
from memory_worker.web import page_model, security

log = logging.getLogger(__name__)

RETRY_MS = 3000  # the browser's reconnect delay (EventSource)
USER_PARAMS = ("user", "user_id", "uid")  # the user is the session's, never the URL's


def after_id(request: Request) -> int:
    """The last toast the client has: ?after=N, or the EventSource's Last-Event-ID."""
    raw = request.query_params.get("after") or request.headers.get("last-event-id") or "0"
    return whole_number(raw, "after / Last-Event-ID (a notice id)", 0, checks.ID_MAX)


async def stream(request: Request) -> Response:
    uid = await security.signed_in_user(request)
    if uid is None:
        return JSONResponse({"ok": False, "error": "not signed in"}, status_code=401)
    if any(p in request.query_params for p in USER_PARAMS):
        msg = "the stream is the signed-in user's; it takes no user id"
        return JSONResponse({"ok": False, "error": msg}, status_code=400)
    try:
        after = after_id(request)
    except BadRequest as e:
        return JSONResponse({"ok": False, "error": str(e)}, status_code=400)
    state = request.app.state
    events = _events(uid, after, state.redis_url, state.rail_poll_s, security.still_live(request))
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )


async def _events(
    user_id: int,
    after: int,
    redis_url: str | None,
    poll_s: float,
    live: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The stream; it ends once its session does (a sign-out elsewhere reaches it too)."""
    nudges = await _subscribe(user_id, redis_url)
    try:
        yield f"retry: {RETRY_MS}\n\n"
        first = True
        while True:
            new = await run_in_threadpool(page_model.rail, user_id, after)
            for n in reversed(new):  # oldest first, so the client's cursor only moves forward
                yield f"event: toast\nid: {n.id}\ndata: {json.dumps(asdict(n))}\n\n"
                after = max(after, n.id)
            if first:  # subscribed and caught up: from here on a nudge is enough
                yield ": listening\n\n"
                first = False
            if not await _wait_for_nudge(nudges, poll_s):
                yield ": still here\n\n"  # a comment keeps proxies from closing an idle stream
            if not await live():
                return
    finally:
        if nudges is not None:
            await _close(nudges)


async def _subscribe(user_id: int, redis_url: str | None) -> PubSub | None:
    if redis_url is None:
        return None
    try:
        client = aioredis.Redis.from_url(redis_url)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(toast_bus.channel(user_id))
        return pubsub
    except (RedisError, OSError) as e:
        log.warning("rail: no Redis channel (%s); reading the store now and then", e)
        return None


async def _wait_for_nudge(pubsub: PubSub | None, poll_s: float) -> bool:
    """True when a channel message came within `poll_s` (what it says is not trusted)."""
    if pubsub is None:
        await asyncio.sleep(poll_s)
        return False
    try:
        msg = await pubsub.get_message(timeout=poll_s)
    except (RedisError, OSError):
        await asyncio.sleep(poll_s)
        return False
    return msg is not None


async def _close(pubsub: PubSub) -> None:
    try:
        # Through a typed name: redis-py annotates `aclose` in some releases and not others.
        close: Callable[[], Awaitable[None]] = pubsub.aclose
        await close()
        await pubsub.connection_pool.disconnect()  # the client made for this stream alone
    except (RedisError, OSError):
        pass
