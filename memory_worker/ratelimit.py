"""The global model quota: requests and tokens per minute, shared by every worker through Redis.

Celery's own `rate_limit` is per worker (DESIGN.md "Traps"). This is a sliding-window log in
one Lua script, run on Redis's own clock, so N workers on M hosts together never send more
than the quota in any window, and a request and its tokens are taken together or not at all.
(`limits`' moving window takes one limit per call and integer rates; a 429's pause and a
fractional rate both need more, and the script is short.)

* Requests: `rpm` a minute is enforced as `n` calls in any `window_s` sliding window, the
  shortest window (≥ 1 s) in which `n` is whole: 300/min → 5 per 1 s, 90/min → 3 per 2 s,
  0.5/min → 1 per 120 s. Bursts stay small and fractional rates are exact on average.
* Tokens: the estimated input tokens of each call in a 60 s sliding window (Gemini's TPM).
  A single call larger than the whole budget still goes, alone.
* A 429 with `retryDelay` pauses everyone (`pause`), not only the worker that got it.

`acquire` is called by `memory_worker.models` at the moment each call is sent (re-asks
included). A wait longer than `max_wait` raises `RateLimited` (a transient model error): the
task retries through Celery, freeing its worker slot instead of sleeping in it.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass

import redis

from memory_worker.constants import REDIS_RATE_KEY
from memory_worker.models.base import TransientModelError

MAX_WAIT_S = 5.0  # past this, hand the call back to the queue: the task retries later
TOKEN_WINDOW_MS = 60_000  # Gemini counts tokens per minute


class RateLimited(TransientModelError):
    """No slot within `max_wait`; `retry_after` says when one is expected."""


@dataclass(frozen=True)
class Quota:
    """`requests` calls in any `window_s` seconds, and `tokens_per_minute`."""

    requests: int
    window_s: float
    tokens_per_minute: float

    @classmethod
    def per_minute(cls, rpm: float, tpm: float) -> Quota:
        if not (math.isfinite(rpm) and rpm > 0 and math.isfinite(tpm) and tpm > 0):
            raise ValueError(f"a quota needs positive finite rates, got rpm={rpm}, tpm={tpm}")
        per_second = rpm / 60.0
        for window in range(1, 3601):
            n = per_second * window
            if n >= 1 and abs(n - round(n)) < 1e-9:
                return cls(int(round(n)), float(window), tpm)
        if per_second * 3600 < 1:  # rarer than once an hour: one call per its interval
            return cls(1, 1.0 / per_second, tpm)
        return cls(max(1, math.floor(rpm)), 60.0, tpm)  # no whole count: round down


# KEYS: requests zset, tokens zset, pause key, tokens total.
# ARGV: requests, window ms, tokens/min, cost, id, token window ms.
# Returns 0 when the slot is taken, else the milliseconds until one may be free.
# The tokens in the window are kept as a running total beside the zset (members "id:cost"):
# a call reads only the entries that left the window since the last one, not the whole
# minute's (thousands a call at a high quota, in the one Redis every worker shares). A total
# that is missing (first use, or lost) is counted again from the zset.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local paused = redis.call('PTTL', KEYS[3])
if paused > 0 then return paused end
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local budget, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
local tw = tonumber(ARGV[6])
local function cost_of(member) return tonumber(string.match(member, ':(%d+)$')) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n >= limit then
  local first = redis.call('ZRANGE', KEYS[1], n - limit, n - limit, 'WITHSCORES')
  return math.max(1, tonumber(first[2]) + window - now)
end
local used = redis.call('GET', KEYS[4])
if used and redis.call('EXISTS', KEYS[2]) == 0 then used = false end  -- outlived its window
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tw)
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tw) end
if used then
  used = tonumber(used)
  for i = 1, #gone do used = used - cost_of(gone[i]) end
else
  used = 0
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do used = used + cost_of(member) end
end
if used > 0 and used + cost > budget then
  redis.call('SET', KEYS[4], used, 'PX', tw + 1000)
  local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local over = used + cost - budget
  for i = 1, #entries, 2 do
    over = over - cost_of(entries[i])
    if over <= 0 then return math.max(1, tonumber(entries[i + 1]) + tw - now) end
  end
end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('PEXPIRE', KEYS[1], window + 1000)
redis.call('ZADD', KEYS[2], now, ARGV[5] .. ':' .. ARGV[4])
redis.call('PEXPIRE', KEYS[2], tw + 1000)
redis.call('SET', KEYS[4], used + cost, 'PX', tw + 1000)
return 0
"""


def _keys(name: str) -> list[str]:
    parts = ("requests", "tokens", "pause", "tokens_total")
    return [REDIS_RATE_KEY.format(name=name, part=p) for p in parts]


def acquire(
    client: redis.Redis,
    name: str,
    quota: Quota,
    tokens: int = 0,
    *,
    max_wait: float = MAX_WAIT_S,
) -> float:
    """Block until a request slot and `tokens` are ours. Returns the seconds waited.

    Raises RateLimited when the wait would pass `max_wait`.
    """
    script = client.register_script(_ACQUIRE)
    started = time.monotonic()
    member = uuid.uuid4().hex
    args = [quota.requests, int(quota.window_s * 1000), quota.tokens_per_minute, max(0, tokens)]
    while True:
        wait_ms = int(script(keys=_keys(name), args=[*args, member, TOKEN_WINDOW_MS]))
        if wait_ms <= 0:
            return time.monotonic() - started
        waited = time.monotonic() - started
        if waited + wait_ms / 1000 > max_wait:
            raise RateLimited(
                f"model quota: no {name} slot within {max_wait:g}s "
                f"({quota.requests} per {quota.window_s:g}s, {quota.tokens_per_minute:g} tok/min)",
                retry_after=wait_ms / 1000,
            )
        time.sleep(wait_ms / 1000)


def pause(client: redis.Redis, name: str, seconds: float) -> None:
    """Hold every worker's next call for `seconds` (the server asked: a 429's retryDelay)."""
    ms = int(seconds * 1000)
    if ms > 0:
        key = _keys(name)[2]
        if client.pttl(key) < ms:
            client.set(key, "1", px=ms)


def estimate_tokens(*texts: str) -> int:
    """Input tokens of a request before it is sent: ~4 characters a token (Gemini's rule)."""
    return sum(math.ceil(len(t) / 4) for t in texts)
