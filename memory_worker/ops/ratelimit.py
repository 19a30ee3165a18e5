"""The global model quota: requests and tokens per minute, shared by every worker through Redis.

Celery's own `rate_limit` is per worker (docs/design.md §14). This is one Lua script, run on
Redis's own clock, so N workers on M hosts together never send more than the quota in any
window, and a request's slot and its tokens are taken together or not at all.

* Requests are spaced, not burst (a generic cell rate): `rpm` a minute is `n` calls in the
  shortest whole window (300/min → 5 per 1 s, 90/min → 3 per 2 s, 0.5/min → 1 per 120 s),
  and each grant comes `(window + margin) / n` after the one before. Five slots granted at
  once reach the model 7–173 ms apart (measured), so Gemini, which counts where it receives,
  saw 10 in a sliding second; spaced grants plus a `margin` covering the send-to-arrival
  jitter never put more than `n` in any window at the model.
* Every slot is a reservation, handed out in the order asked (a ticket): a caller whose slot
  is further than `max_wait` away keeps it and comes back for it (`RateLimited.slot_ms`,
  `holding`), so a backlog is served in order instead of scrambling, and nobody who came
  later overtakes it. A ticket not used in time is given up and the caller asks again.
* The call itself is gated: once its slot has come, a caller stamps the moment it goes in a
  sliding log on Redis's clock (`_GATE`) and goes only if fewer than `n` calls went in the
  last window + margin; else it waits for the oldest to leave. A slot says when a call may
  go, not when it does: a thread woken late from its sleep on a loaded host (three workers
  starting at once on two cores: 0.1–0.3 s late) then sent beside the calls granted after
  it, and the model saw 6–7 in one second at 300 a minute with every grant spaced right.
  Only the jitter after the stamp (building the request, the network; tens of ms, the
  margin's job) is left between the log and the model. The log keeps the last calls' stamps
  for a while (`sent_log`): the quota's own record, which holds at any speed.
* Tokens: the estimated input tokens of each call in a 60 s sliding window (Gemini's TPM).
  A single call larger than the whole budget still goes, alone.
* A 429 with `retryDelay` pauses everyone (`pause`), not only the worker that got it.

`acquire` is called by `memory_worker.models` at the moment each call is sent (re-asks
included). A wait longer than `max_wait` raises `RateLimited` (a transient model error that
is back-pressure, not a fault): the task retries through Celery with its ticket, freeing its
worker slot instead of sleeping in it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import cast

import redis

from memory_worker.core.constants import REDIS_RATE_KEY
from memory_worker.core.errors import RateLimited

MAX_WAIT_S = 5.0  # past this, hand the call back to the queue (MW_MODEL_QUOTA_MAX_WAIT_S)
TOKEN_WINDOW_MS = 60_000  # Gemini counts tokens per minute

_held: ContextVar[int | None] = ContextVar("held_slot", default=None)


@dataclass(frozen=True)
class Grant:
    """A slot that is ours: `at_ms` on Redis's clock (when the call may go), `sent_ms` (when
    the gate let it go, on the same clock), `waited_s` in all."""

    at_ms: int
    waited_s: float
    sent_ms: int = 0


@dataclass(frozen=True)
class Quota:
    """`requests` calls in any `window_s` seconds, and `tokens_per_minute`; grants spaced
    `interval_ms` apart, which `margin_s` (the send-to-arrival jitter) stretches."""

    requests: int
    window_s: float
    tokens_per_minute: float
    margin_s: float = 0.0

    @classmethod
    def per_minute(cls, rpm: float, tpm: float, margin_s: float = 0.0) -> Quota:
        if not (math.isfinite(rpm) and rpm > 0 and math.isfinite(tpm) and tpm > 0):
            raise ValueError(f"a quota needs positive finite rates, got rpm={rpm}, tpm={tpm}")
        if not (math.isfinite(margin_s) and margin_s >= 0):
            raise ValueError(f"a quota's margin must be ≥ 0 seconds, got {margin_s}")
        per_second = rpm / 60.0
        for window in range(1, 3601):
            n = per_second * window
            if n >= 1 and abs(n - round(n)) < 1e-9:
                return cls(int(round(n)), float(window), tpm, margin_s)
        if per_second * 3600 < 1:  # rarer than once an hour: one call per its interval
            return cls(1, 1.0 / per_second, tpm, margin_s)
        return cls(max(1, math.floor(rpm)), 60.0, tpm, margin_s)  # no whole count: round down

    @property
    def interval_ms(self) -> float:
        """The spacing of grants: `requests` of them never fit in a half-open window."""
        return (self.window_s + self.margin_s) * 1000.0 / self.requests


# KEYS: next free slot (the ticket counter), tokens zset, pause key, tokens total.
# ARGV: interval ms, tokens/min, cost, id, token window ms, held slot ms (0: none).
# Returns {ms until our slot, our slot in ms on Redis's clock}; slot 0: nothing reserved
# (the tokens are spent: come back after the returned ms and ask again).
# The tokens in the window are kept as a running total beside the zset (members "id:cost"):
# a call reads only the entries that left the window since the last one, not the whole
# minute's (thousands a call at a high quota, in the one Redis every worker shares). A total
# that is missing (first use, or lost) is counted again from the zset.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local budget, cost = tonumber(ARGV[2]), tonumber(ARGV[3])
local tw, held = tonumber(ARGV[5]), tonumber(ARGV[6])
local open_at = now
local paused = redis.call('PTTL', KEYS[3])
if paused > 0 then open_at = now + paused end
if held > 0 and held >= now and held >= open_at then return {held - now, held} end
local function cost_of(member) return tonumber(string.match(member, ':(%d+)$')) end
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
    if over <= 0 then return {math.max(1, tonumber(entries[i + 1]) + tw - now), 0} end
  end
end
local slot = math.max(now, open_at, tonumber(redis.call('GET', KEYS[1]) or '0'))
local after = math.ceil(slot + interval)
redis.call('SET', KEYS[1], after, 'PX', after - now + 1000)
redis.call('ZADD', KEYS[2], slot, ARGV[4] .. ':' .. ARGV[3])
redis.call('PEXPIRE', KEYS[2], slot - now + tw + 1000)
redis.call('SET', KEYS[4], used + cost, 'PX', slot - now + tw + 1000)
return {slot - now, slot}
"""


# KEYS: the log of calls gone (a zset scored by when). ARGV: n, window ms (with the margin),
# id, calls kept, ms kept. Returns {0, now}: stamped, go now; or {ms until the oldest call in
# the window leaves, 0}. Only the window counts; the log keeps the newest `calls kept` stamps
# (never fewer than n) for `ms kept` after the last: the quota's own record of what went.
_GATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local since = '(' .. (now - window)
if redis.call('ZCOUNT', KEYS[1], since, '+inf') < n then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(math.max(n, tonumber(ARGV[4])) + 1))
  redis.call('PEXPIRE', KEYS[1], math.max(window + 1000, tonumber(ARGV[5])))
  return {0, now}
end
local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], since, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {math.max(1, tonumber(oldest[2]) + window - now), 0}
"""
# The gate's log: the stamps of the last calls that went, kept a while after the last one, so
# the quota can be checked on its own record (`sent_log`) at any speed — what the model saw
# adds only the jitter after the stamp, which the margin covers (make perf measures it).
SENT_LOG_CALLS = 1_000
SENT_LOG_KEEP_MS = 600_000


def _keys(name: str) -> list[str]:
    parts = ("next_slot", "tokens", "pause", "tokens_total", "sent")
    return [REDIS_RATE_KEY.format(name=name, part=p) for p in parts]


@contextmanager
def holding(slot_ms: int | None) -> Iterator[None]:
    """Present the ticket a deferred task kept (`RateLimited.slot_ms`) at its next `acquire`
    in this context; the calls after it queue as anyone's."""
    token = _held.set(slot_ms or None)
    try:
        yield
    finally:
        _held.reset(token)


def acquire(
    client: redis.Redis,
    name: str,
    quota: Quota,
    tokens: int = 0,
    *,
    max_wait: float = MAX_WAIT_S,
) -> Grant:
    """Block until a request slot and `tokens` are ours; returns the grant.

    Raises RateLimited (with the slot kept for us) when the wait would pass `max_wait`.
    """
    script = client.register_script(_ACQUIRE)
    keys = _keys(name)
    started = time.monotonic()
    member = uuid.uuid4().hex
    args: list[str | float] = [
        quota.interval_ms, quota.tokens_per_minute, max(0, tokens), member, TOKEN_WINDOW_MS
    ]  # fmt: skip
    held = _held.get() or 0
    _held.set(None)  # a ticket serves one call
    while True:
        wait_ms, slot = (int(x) for x in script(keys=keys[:4], args=[*args, held]))
        waited = time.monotonic() - started
        if wait_ms > 0 and waited + wait_ms / 1000 > max_wait:
            raise RateLimited(
                f"model quota: no {name} slot within {max_wait:g}s "
                f"({quota.requests} per {quota.window_s:g}s, {quota.tokens_per_minute:g} tok/min)",
                retry_after=wait_ms / 1000,
                slot_ms=slot,
            )
        time.sleep(max(0, wait_ms) / 1000)
        if slot:  # reserved for us: it is ours when the sleep ends, and goes through the gate
            sent = _through_the_gate(client, keys[4], quota, member)
            return Grant(slot, time.monotonic() - started, sent)


def _through_the_gate(client: redis.Redis, key: str, quota: Quota, member: str) -> int:
    """Wait until fewer than `quota.requests` calls went in the last window + margin, then
    stamp this one as gone: returns when, on Redis's clock (ms)."""
    gate = client.register_script(_GATE)
    window_ms = (quota.window_s + quota.margin_s) * 1000.0
    args: list[str | float] = [quota.requests, window_ms, member, SENT_LOG_CALLS, SENT_LOG_KEEP_MS]
    while True:
        wait_ms, sent = (int(x) for x in gate(keys=[key], args=args))
        if not wait_ms:
            return sent
        time.sleep(wait_ms / 1000)


def sent_log(client: redis.Redis, name: str) -> list[int]:
    """When each of the last calls went through the gate (ms on Redis's clock), oldest first:
    at most SENT_LOG_CALLS of them (or the quota's n), for SENT_LOG_KEEP_MS after the last."""
    stamps = client.zrange(_keys(name)[4], 0, -1, withscores=True)
    return [int(ms) for _, ms in cast(list[tuple[bytes, float]], stamps)]


def most_in_any_window(times: Sequence[float], window: float) -> int:
    """The most of `times` inside any half-open sliding window (t - window, t]: what a quota of
    that window counts (`sent_log`'s stamps in ms, a model's arrivals in seconds)."""
    ordered = sorted(times)
    best, j = 0, 0
    for i, at in enumerate(ordered):
        while ordered[j] <= at - window:
            j += 1
        best = max(best, i - j + 1)
    return best


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
