"""Pick the model provider the settings name: 'gemini' (the live API) or 'replay' (offline).

The write path asks `chat_model()` / `embedder()` and never names a provider, so the demo,
the exams and production run the same code. Built providers are cached per settings *and per
process*: a google-genai client holds a connection pool, which is wasteful to rebuild per call
and unsafe to share across a fork (a prefork worker child must build its own).

Nothing heavy is imported here: `google.genai` is imported only when a gemini provider is built.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from memory_worker.core import settings as settings_mod
from memory_worker.core.errors import (
    MalformedAnswer,
    ModelError,
    PermanentModelError,
    TransientModelError,
)
from memory_worker.core.model_interfaces import ChatModel, ChatResult, Embedder, Usage
from memory_worker.core.settings import Settings

__all__ = [
    "PROVIDERS",
    "ChatModel",
    "ChatResult",
    "Embedder",
    "MalformedAnswer",
    "ModelError",
    "PermanentModelError",
    "TransientModelError",
    "Usage",
    "chat_model",
    "clear_cache",
    "embedder",
    "named_embedder",
]

PROVIDERS = ("replay", "gemini")
# Embedders by the name MW_EMBEDDER takes; "" picks gemini's with the gemini provider, else
# OFFLINE_EMBEDDER.
EMBEDDERS = ("gemini", "hashing", "e5")
OFFLINE_EMBEDDER = "e5"  # semantic with no key (LoCoMo 7–10: 0.86, hashing 0.72)
# Settings objects seen per process are few (one, plus tests'); a bound keeps tests honest.
_CACHE_MAX = 32

_B = TypeVar("_B")
_cache: dict[tuple[int, str, Settings], Any] = {}
_lock = threading.Lock()


def _cached(kind: str, settings: Settings, build: Callable[[Settings], _B]) -> _B:
    """`build(settings)` once per (process, kind, settings); objects of another pid are dropped."""
    pid = os.getpid()
    key = (pid, kind, settings)
    with _lock:
        if key in _cache:
            return cast(_B, _cache[key])
    made = build(settings)  # outside the lock: building a client must not serialise threads
    with _lock:
        for stale in [k for k in _cache if k[0] != pid]:
            del _cache[stale]  # inherited from the parent: its sockets are not ours to use
        if key not in _cache and len(_cache) >= _CACHE_MAX:
            del _cache[next(iter(_cache))]  # the oldest
        return cast(_B, _cache.setdefault(key, made))


def clear_cache() -> None:
    """Forget every built provider (tests; a settings change in a long-lived process)."""
    with _lock:
        _cache.clear()


def _provider(settings: Settings) -> str:
    if settings.provider not in PROVIDERS:
        raise ValueError(
            f"unknown model provider {settings.provider!r} (MW_PROVIDER): "
            f"expected one of {', '.join(PROVIDERS)}"
        )
    return settings.provider


def _gemini_client(settings: Settings) -> Any:
    from memory_worker.models import gemini

    return _cached("gemini-client", settings, gemini.make_client)


def _build_chat(settings: Settings) -> ChatModel:
    if _provider(settings) == "gemini":
        from memory_worker.models.gemini import GeminiChat
        from memory_worker.models.limited import LimitedChat

        return LimitedChat(GeminiChat(settings, client=_gemini_client(settings)), settings)
    from memory_worker.models.replay import ReplayChat

    return ReplayChat(settings)


def embedder_name(settings: Settings) -> str:
    """The embedder the settings pick (MW_EMBEDDER, else by the provider)."""
    name = settings.embedder or ("gemini" if _provider(settings) == "gemini" else OFFLINE_EMBEDDER)
    if name not in EMBEDDERS:
        raise ValueError(
            f"unknown embedder {name!r} (MW_EMBEDDER): expected one of {', '.join(EMBEDDERS)}"
        )
    return name


def _build_embedder(settings: Settings) -> Embedder:
    return named_embedder(embedder_name(settings), settings)


def named_embedder(name: str, settings: Settings | None = None) -> Embedder:
    """A fresh embedder by name (benchmarks compare them; the write path uses `embedder()`)."""
    if name == "gemini":
        from memory_worker.models.gemini import GeminiEmbedder
        from memory_worker.models.limited import LimitedEmbedder

        s = settings if settings is not None else settings_mod.current()
        return LimitedEmbedder(GeminiEmbedder(s, client=_gemini_client(s)), s)
    if name == "hashing":
        from memory_worker.models.hashing import HashingEmbedder

        return HashingEmbedder()
    if name == "e5":
        from memory_worker.models.local import E5Embedder

        return E5Embedder((settings or settings_mod.current()).embed_threads)
    raise ValueError(f"unknown embedder {name!r}: expected one of {', '.join(EMBEDDERS)}")


def chat_model(settings: Settings | None = None) -> ChatModel:
    """The chat model the settings name (None: the settings in force).

    Raises ValueError for an unknown provider, PermanentModelError for a gemini provider with
    no API key.
    """
    s = settings if settings is not None else settings_mod.current()
    _provider(s)
    return _cached("chat", s, _build_chat)


def embedder(settings: Settings | None = None) -> Embedder:
    """The embedder the settings name: Gemini's, or the offline e5 one for 'replay'."""
    s = settings if settings is not None else settings_mod.current()
    _provider(s)
    return _cached("embed", s, _build_embedder)
