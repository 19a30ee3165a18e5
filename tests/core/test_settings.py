"""Settings come from the environment, are checked when read (naming the variable), and
survive the trip to a worker process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_worker.core.constants import WORKER_SOFT_SHUTDOWN_S
from memory_worker.core.errors import ConfigError
from memory_worker.core.settings import EMBEDDED, Settings, redact


def test_defaults_are_the_embedded_broker_a_local_sqlite_file_and_the_replay_model() -> None:
    s = Settings.from_env({})
    assert s.broker_url == EMBEDDED
    assert s.database_url == "sqlite:///memory_worker.db"
    assert s.provider == "replay" and s.embed_model == "gemini-embedding-001"


def test_redis_url_and_database_url_are_read() -> None:
    s = Settings.from_env({"REDIS_URL": "redis://h:1/2", "DATABASE_URL": "postgresql://x/y"})
    assert s.broker_url == "redis://h:1/2" and s.database_url == "postgresql+psycopg://x/y"


def test_a_heroku_style_postgres_url_is_accepted() -> None:
    s = Settings.from_env({"DATABASE_URL": "postgres://u:p@db.example:5432/mem"})
    assert s.database_url == "postgresql+psycopg://u:p@db.example:5432/mem"


def test_an_empty_variable_means_unset() -> None:
    assert Settings.from_env({"MW_PROVIDER": "", "MW_TODAY": " "}) == Settings.from_env({})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MW_PROVIDER": "unknown"}, "MW_PROVIDER"),
        ({"MW_MODEL_RPM": "nan"}, "MW_MODEL_RPM"),
        ({"MW_MODEL_RPM": "0"}, "MW_MODEL_RPM"),
        ({"MW_MODEL_TPM": "inf"}, "MW_MODEL_TPM"),
        ({"MW_MODEL_TIMEOUT_MS": "0"}, "MW_MODEL_TIMEOUT_MS"),
        ({"MW_MODEL_TIMEOUT_MS": "-5"}, "MW_MODEL_TIMEOUT_MS"),
        ({"MW_MODEL_TIMEOUT_MS": "soon"}, "MW_MODEL_TIMEOUT_MS"),
        ({"MW_RETRY_BACKOFF_BASE_S": "nan"}, "MW_RETRY_BACKOFF_BASE_S"),
        ({"MW_SWEEP_LAG_S": "-1"}, "MW_SWEEP_LAG_S"),
        ({"MW_METRICS_PORT": "70000"}, "MW_METRICS_PORT"),
        ({"REDIS_URL": "http://localhost:6379"}, "REDIS_URL"),
        ({"MW_DATABASE_URL": "mysql://x/y"}, "MW_DATABASE_URL"),
        ({"MW_TODAY": "2026-13-01"}, "MW_TODAY"),
        ({"MW_EMBED_THREADS": "0"}, "MW_EMBED_THREADS"),
        ({"MW_WORKER_NICE": "20"}, "MW_WORKER_NICE"),
        ({"MW_STORE_OUTAGE_WAIT_S": "0"}, "MW_STORE_OUTAGE_WAIT_S"),
        ({"MW_STORE_OUTAGE_WAIT_S": "inf"}, "MW_STORE_OUTAGE_WAIT_S"),
        ({"MW_PERSONA_MODELS": ","}, "MW_PERSONA_MODELS"),  # no model: the gate checks none
        ({"MW_PERSONA_MODELS": " , "}, "MW_PERSONA_MODELS"),
    ],
)
def test_a_bad_value_fails_at_once_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=f"^invalid configuration: {named}: [^\n]*$"):
        Settings.from_env(env)


def test_a_setting_that_was_renamed_is_refused_naming_what_replaced_it() -> None:
    """MW_MODEL_CALLS_PER_SECOND was silently ignored: no limit where one was meant."""
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"MW_MODEL_CALLS_PER_SECOND": "10"})
    assert str(err.value) == (
        "invalid configuration: MW_MODEL_CALLS_PER_SECOND: no longer a setting; "
        "replaced by MW_MODEL_RPM (requests per minute: 10 a second is 600)"
    )


def test_an_mw_variable_no_setting_reads_is_refused_with_the_nearest_name() -> None:
    with pytest.raises(
        ConfigError, match="MW_SWEEP_LAGS: not a setting; did you mean MW_SWEEP_LAG_S"
    ):
        Settings.from_env({"MW_SWEEP_LAGS": "60", "MW_SWEEP_LAG_S": "-1"})
    # the Procfile's per-process ports and the test suite's own are not settings, and allowed
    assert Settings.from_env({"MW_METRICS_PORT_MODEL": "9101", "MW_TEST_REDIS_URL": "x"})


def test_a_bad_database_url_is_reported_without_its_password() -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"DATABASE_URL": "mysql://admin:hunter2@db/x"})
    assert "hunter2" not in str(err.value) and "admin:***@db" in str(err.value)


def test_the_provider_and_what_it_needs_are_checked() -> None:
    assert "GEMINI_API_KEY" in Settings.from_env({"MW_PROVIDER": "gemini"}).provider_problems()[0]
    assert (
        Settings.from_env({"MW_PROVIDER": "gemini", "GEMINI_API_KEY": "k"}).provider_problems()
        == []
    )
    assert "MW_CASSETTE" in Settings.from_env({}).provider_problems()[0]
    missing = Settings.from_env({"MW_CASSETTE": "/nonexistent/c.json"}).provider_problems()
    assert "no such file" in missing[0]


def test_passwords_and_the_key_never_show_in_the_summary_or_the_repr() -> None:
    s = Settings.from_env(
        {
            "REDIS_URL": "redis://:s3cret@h:6379/0",
            "DATABASE_URL": "postgresql://me:pw123@h/db",
            "GEMINI_API_KEY": "AIzaKEY",
        }
    )
    shown = repr(s) + str(s.summary())
    assert "s3cret" not in shown and "pw123" not in shown and "AIzaKEY" not in shown
    assert s.summary()["MW_BROKER_URL"] == "redis://:***@h:6379/0"
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


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
        model_requests_per_minute=7.5,
    )
    assert Settings.from_env(s.as_env()) == s


def test_a_copy_with_changes_is_checked_too() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        Settings.from_env({}).with_(model_timeout_ms=0)


def _niceness_after_yield(env: dict[str, str]) -> tuple[int, int]:
    """(niceness before, after) `startup.yield_cores()` in a fresh process with `env`."""
    code = (
        "import os; before = os.nice(0); from memory_worker.tasks import startup; "
        "startup.yield_cores(); print(before, os.nice(0))"
    )
    clean = {k: v for k, v in os.environ.items() if k != "MW_WORKER_NICE"}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split()
    return int(before), int(after)


@pytest.mark.processes  # starts Python processes that import Celery: seconds
def test_a_worker_steps_back_from_the_cores_by_mw_worker_nice_10_unless_told_otherwise() -> None:
    before, after = _niceness_after_yield({})
    assert after == min(before + 10, 19)
    before, after = _niceness_after_yield({"MW_WORKER_NICE": "0"})
    assert after == before


def _celery_setting(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`app.conf.<name>` as a worker started with `env` would read it."""
    code = f"from memory_worker.tasks.celery_app import app; print(app.conf.{name})"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MW_WORKER_SOFT")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True
    )


@pytest.mark.processes  # starts Python processes that import Celery: seconds
def test_a_workers_soft_shutdown_is_mw_worker_soft_shutdown_s_and_a_bad_one_is_named() -> None:
    default = _celery_setting("worker_soft_shutdown_timeout", {})
    assert default.returncode == 0, default.stderr
    assert float(default.stdout) == WORKER_SOFT_SHUTDOWN_S
    told = _celery_setting("worker_soft_shutdown_timeout", {"MW_WORKER_SOFT_SHUTDOWN_S": "2.5"})
    assert float(told.stdout) == 2.5
    bad = _celery_setting("worker_soft_shutdown_timeout", {"MW_WORKER_SOFT_SHUTDOWN_S": "0"})
    assert bad.returncode != 0 and "MW_WORKER_SOFT_SHUTDOWN_S" in bad.stderr, bad.stderr
