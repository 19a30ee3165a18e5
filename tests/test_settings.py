"""Settings come from the environment, with documented defaults, and survive the trip to a
worker process."""

from __future__ import annotations

from pathlib import Path

from memory_worker.settings import EMBEDDED, Settings


def test_defaults_are_the_embedded_broker_a_local_sqlite_file_and_the_replay_model() -> None:
    s = Settings.from_env({})
    assert s.broker_url == EMBEDDED
    assert s.database_url == "sqlite:///memory_worker.db"
    assert s.provider == "replay" and s.embed_model == "gemini-embedding-001"


def test_redis_url_and_database_url_are_read() -> None:
    s = Settings.from_env({"REDIS_URL": "redis://h:1/2", "DATABASE_URL": "postgresql://x/y"})
    assert s.broker_url == "redis://h:1/2" and s.database_url == "postgresql://x/y"


def test_settings_survive_the_environment_of_a_child_process() -> None:
    s = Settings(
        database_url="sqlite:///x.db",
        broker_url="redis://127.0.0.1:7/0",
        provider="gemini",
        gemini_api_key="k",
        gemini_base_url="http://127.0.0.1:9",
        cassette=Path("c.json"),
        today="2026-08-18",
        retry_backoff_base_s=0.5,
    )
    assert Settings.from_env(s.as_env()) == s
