"""Toasts reach the app: a message on a Redis pub/sub channel per human when a stored toast is
told (`tasks.delivery`: the commit task, or the sweep).

The message carries ids only (the notice, the persona, the room, the rows) — never the toast's
text, which stays in the store: an app that pushes it reads the notice through
`memory_worker.web.page_model.rail`, which checks it is the listener's. Pub/sub is a nudge, not a
delivery: a message nobody hears is lost, so listeners also read the store (the outbox) when
they connect and now and then after.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass

import redis

from memory_worker.core.constants import TOAST_CHANNEL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToastPosted:
    """What the channel says: which notice, for whom, about which rows. No memory text."""

    notice_id: int
    user_id: int
    persona: str
    room_id: str
    row_ids: list[int]

    def to_message(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_message(cls, raw: str | bytes) -> ToastPosted:
        """Parse a channel message; ValueError (naming the problem) for anything malformed."""
        try:
            d = json.loads(raw)
            return cls(
                notice_id=_int(d["notice_id"]),
                user_id=_int(d["user_id"]),
                persona=str(d["persona"]),
                room_id=str(d["room_id"]),
                row_ids=[_int(i) for i in d["row_ids"]],
            )
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"not a toast message: {e}") from e


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer id, got {type(v).__name__}")
    return v


def channel(user_id: int) -> str:
    return TOAST_CHANNEL.format(user_id=int(user_id))


def publish(client: redis.Redis, posted: ToastPosted) -> bool:
    """Best effort: a Redis fault is logged, never raised — the notice is already stored."""
    try:
        client.publish(channel(posted.user_id), posted.to_message())
        return True
    except redis.RedisError as e:
        log.warning(
            "toast %s: not published (%s); listeners will read the store", posted.notice_id, e
        )
        return False
