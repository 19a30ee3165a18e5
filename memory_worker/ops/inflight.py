"""One spell, one run: a key per persona and room while a spell is in flight.

The *claim* of docs/design.md §10.2 and §16: `room_quiet` called five times in quick succession, a
sweep racing a quiet event, a backlog's next window: each would begin a spell at the same cursor and
pay the model for the same lines. Whoever starts a spell first claims `mw:spell:{persona}:{room_id}`
(SET NX with a short expiry); the others see it held and start nothing. A step of the chain renews
the claim (`renew`) when it was last renewed over a sixth of its lifetime ago, the commit releases
it — both only while it still holds the claimant's token — so a chain lost with a killed worker or a
wiped broker frees its room within MW_INFLIGHT_TTL_S, and the sweep picks the room up again. A claim
that lapses while a step waits out a long retry lets a second spell begin: that costs a model call,
never a row (the commit is exactly-once). Redis holds nothing here that cannot be rebuilt.
"""

from __future__ import annotations

import secrets

import redis

from memory_worker.core.constants import INFLIGHT_TTL_S, REDIS_INFLIGHT_KEY

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


_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) "
    "end return 0"
)


def renew(
    client: redis.Redis, persona: str, room_id: str, token: str | None, ttl_s: int = INFLIGHT_TTL_S
) -> bool:
    """Extend the claim if `token` still holds it (each step of the chain). True when it did."""
    if not token:
        return False
    return bool(client.eval(_RENEW, 1, key(persona, room_id), token, ttl_s))


def release(client: redis.Redis, persona: str, room_id: str, token: str | None) -> bool:
    """Free the claim if `token` still holds it. True when it did."""
    if not token:
        return False
    return bool(client.eval(_RELEASE, 1, key(persona, room_id), token))


def forget_all(client: redis.Redis) -> int:
    """Drop every claim: after the broker died, the chains that held them lost their
    connections and their messages may be gone; a claim kept (the append-only file) would
    hold its room for a claim's lifetime. A claim dropped costs at most a model call, never a
    row. Returns how many."""
    pattern = REDIS_INFLIGHT_KEY.format(persona="*", room_id="*")
    keys = list(client.scan_iter(match=pattern, count=1000))
    return int(client.delete(*keys)) if keys else 0
