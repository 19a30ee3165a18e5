"""Every live model call takes its slot in the global quota at the moment it is sent.

A thin wrapper over a provider: `acquire` (requests and estimated input tokens, shared by all
workers through Redis) right before the call, so a re-ask after a malformed answer pays like
any call and nothing is counted for clients that were built but never used. A 429 that names
a `retryDelay` pauses every worker's next call, not only this one's. Counts and waits go to
the Prometheus metrics. The replay provider makes no network call and is not wrapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import redis

from memory_worker.core.errors import MalformedAnswer, RateLimited, TransientModelError
from memory_worker.core.model_interfaces import ChatModel, ChatResult, Embedder, T
from memory_worker.core.settings import Settings
from memory_worker.ops import metrics, ratelimit

QUOTA_NAME = "model"  # one quota for chat and embeddings: the API counts them together
R = TypeVar("R")


class _Limited:
    def __init__(self, settings: Settings):
        self.quota = ratelimit.Quota.per_minute(
            settings.model_requests_per_minute,
            settings.model_tokens_per_minute,
            settings.model_quota_margin_s,
        )
        self.max_wait = settings.model_quota_max_wait_s

    def _redis(self) -> redis.Redis:
        from memory_worker.ops import broker  # resolved at the first call: importing starts nothing

        return broker.client(broker.url())

    def _send(self, purpose: str, tokens: int, call: Callable[[], R]) -> R:
        client = self._redis()
        try:
            grant = ratelimit.acquire(
                client, QUOTA_NAME, self.quota, tokens, max_wait=self.max_wait
            )
        except RateLimited:
            metrics.RATE_DEFERRED.inc()
            raise
        metrics.RATE_WAIT.observe(grant.waited_s)
        try:
            result = call()
        except TransientModelError as err:
            metrics.MODEL_CALLS.labels(purpose, f"http_{err.status or 'transport'}").inc()
            if err.status == 429 and err.retry_after:
                ratelimit.pause(client, QUOTA_NAME, err.retry_after)
            raise
        except MalformedAnswer:
            metrics.MODEL_CALLS.labels(purpose, "malformed").inc()
            raise
        except Exception:
            metrics.MODEL_CALLS.labels(purpose, "error").inc()
            raise
        metrics.MODEL_CALLS.labels(purpose, "ok").inc()
        return result


class LimitedChat(_Limited):
    def __init__(self, inner: ChatModel, settings: Settings):
        super().__init__(settings)
        self.inner = inner

    def chat_json(
        self, system: str, prompt: str, schema: type[T], *, purpose: str
    ) -> ChatResult[T]:
        tokens = ratelimit.estimate_tokens(system, prompt)
        result = self._send(
            purpose, tokens, lambda: self.inner.chat_json(system, prompt, schema, purpose=purpose)
        )
        metrics.MODEL_TOKENS.labels("in").inc(result.usage.tokens_in)
        metrics.MODEL_TOKENS.labels("out").inc(result.usage.tokens_out)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class LimitedEmbedder(_Limited):
    def __init__(self, inner: Embedder, settings: Settings):
        super().__init__(settings)
        self.inner = inner
        self.dims = inner.dims

    def embed(self, texts: list[str], *, purpose: str) -> list[list[float]]:
        tokens = ratelimit.estimate_tokens(*texts)
        return self._send(purpose, tokens, lambda: self.inner.embed(texts, purpose=purpose))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
