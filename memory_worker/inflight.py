"""One spell, one run: a key per persona and room while a spell is in flight (issue 7).

`room_quiet` called five times in quick succession, a sweep racing a quiet event, a backlog's
next window: each would begin a spell at the same cursor and pay the model for the same lines.
Whoever starts a spell first claims `mw:spell:{persona}:{room_id}` (SET NX with an expiry);
the others see it held and start nothing. The commit releases it — only if it still holds
the claimant's token — and a worker lost mid-chain costs at most INFLIGHT_TTL_S, after which
the sweep picks the room up again. Redis holds nothing here that cannot be rebuilt.
"""

from __future__ import annotations

import secrets

import redis

from memory_worker.constants import INFLIGHT_TTL_S, REDIS_INFLIGHT_KEY

# Delete the key only if it still holds our token: a late duplicate of an old chain must not
# free a newer spell's claim.
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)


def key(persona: str, room_id: str) -> str:
    return REDIS_INFLIGHT_KEY.format(persona=persona, room_id=room_id)


def claim(
    client: redis.Redis, persona: str, room_id: str, ttl_s: int = INFLIGHT_TTL_S
) -> str | None:
    """A fresh token if no spell of this persona in this room is in flight, else None."""
    token = secrets.token_hex(8)
    return token if client.set(key(persona, room_id), token, nx=True, ex=ttl_s) else None


def release(client: redis.Redis, persona: str, room_id: str, token: str | None) -> bool:
    """Free the claim if `token` still holds it. True when it did."""
    if not token:
        return False
    return bool(client.eval(_RELEASE, 1, key(persona, room_id), token))
