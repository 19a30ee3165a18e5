"""The retry policy of the model tasks: backoff grows, is jittered, is capped far below the
broker's visibility timeout, and never comes sooner than the server's retry-after."""

from __future__ import annotations

from memory_worker.core import settings as settings_mod
from memory_worker.core.constants import (
    RETRY_BACKOFF_MAX_S,
    STORE_RETRY_MAX_S,
    VISIBILITY_TIMEOUT_S,
)
from memory_worker.tasks.model_step import backoff
from memory_worker.tasks.store_step import store_backoff


def test_a_retry_never_comes_before_the_servers_retry_after() -> None:
    for retries in range(6):
        assert all(backoff(retries, 12.0) >= 12.0 for _ in range(50))


def test_backoff_doubles_with_jitter_and_stays_under_the_visibility_timeout() -> None:
    base = settings_mod.current().retry_backoff_base_s
    first = [backoff(0, None) for _ in range(200)]
    third = [backoff(2, None) for _ in range(200)]
    assert base / 2 <= min(first) and max(first) <= base
    assert base * 2 <= min(third) and max(third) <= base * 4
    assert len({round(x, 6) for x in first}) > 1  # jittered: workers do not retry in step
    huge = [backoff(30, 10_000.0) for _ in range(50)]
    assert max(huge) <= RETRY_BACKOFF_MAX_S < VISIBILITY_TIMEOUT_S


def test_a_step_waiting_for_the_store_tries_again_within_seconds_under_the_visibility_timeout() -> (
    None
):
    soon = [store_backoff(0.0) for _ in range(200)]
    late = [store_backoff(3_000.0) for _ in range(200)]
    assert 0.5 <= min(soon) and max(soon) <= 1.0  # a blip: tried again within a second
    assert len({round(x, 6) for x in soon}) > 1  # jittered: a room's steps do not knock at once
    assert STORE_RETRY_MAX_S / 2 <= min(late) and max(late) <= STORE_RETRY_MAX_S
    assert STORE_RETRY_MAX_S * 10 < VISIBILITY_TIMEOUT_S
