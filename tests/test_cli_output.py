"""What the commands print (docs/design.md §10.11, §10.12): no secret on any output, a taken
port said plainly and no link, and a store that is not ready said as what it is — refused,
unknown, not migrated, empty — each with its fix."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, make_url

from memory_worker import cli
from memory_worker.core import settings as settings_mod
from memory_worker.demo import CASSETTE
from memory_worker.ops import embedded
from tests import scenes
from tests.scenes import DAN

pytestmark = pytest.mark.store

PASSWORD = "S3cretPassw0rd"  # planted in both URLs; no output may hold it
RUN_TIMEOUT_S = 120.0  # a command that hangs fails the test instead of stalling it
ROOT = Path(__file__).resolve().parent.parent


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refused_store() -> str:
    return f"postgresql+psycopg://mwuser:{PASSWORD}@127.0.0.1:{closed_port()}/mw"


@pytest.fixture
def settings_of() -> Iterator[Callable[..., None]]:
    """Point the settings in force at a URL for one test, and back after."""
    before = settings_mod.current()

    def use(**changes: object) -> None:
        settings_mod.configure(before.with_(**changes))

    yield use
    settings_mod.configure(before)


# --- serve binds before it prints ---------------------------------------------------------------


def test_serve_on_a_taken_port_says_so_and_prints_no_link(
    db: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    scenes.people(db)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert cli.main(["serve", "--user", str(DAN), "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert "/login?token=" not in out + err
    assert f"cannot listen on 127.0.0.1:{port}: the port is taken" in err and "--port" in err


def test_the_serve_banner_names_the_store_without_its_password() -> None:
    from memory_worker.web.serve import banner

    url = f"postgresql+psycopg://mwuser:{PASSWORD}@db.example:5432/mw"
    shown = "\n".join(banner("http://127.0.0.1:8420", url, empty=False, toasts_on_redis=True))
    assert "(store postgresql+psycopg://mwuser:***@db.example:5432/mw)" in shown
    assert PASSWORD not in shown


# --- four different things wrong with a store, four messages ----------------------------------


READERS = [
    ["block", "--persona", "warren", "--present", "42", "--room", "dm-dan"],
    ["parked"],
    ["sweep"],
    ["reembed"],
    ["serve", "--user", "42", "--port", "0"],
]


@pytest.mark.parametrize("argv", [*READERS, ["init-db"]], ids=lambda a: a[0])
def test_a_store_that_refuses_the_connection_is_called_that_with_its_fix(
    argv: list[str], settings_of: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    settings_of(database_url=refused_store())
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "connection was refused: start the database server" in err, err
    assert "init-db" not in err and PASSWORD not in err


@pytest.mark.parametrize("argv", READERS, ids=lambda a: a[0])
def test_a_store_never_migrated_says_run_init_db(
    argv: list[str],
    tmp_path: Path,
    settings_of: Callable[..., None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    blank = tmp_path / "blank.db"
    blank.touch()  # there, but never migrated
    settings_of(database_url=f"sqlite:///{blank}")
    assert cli.main(argv) == 2
    assert "is not initialised: run `memory-worker init-db`" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [READERS[0], READERS[4]], ids=["block", "serve"])
def test_block_and_serve_on_an_empty_store_name_it_and_say_it_is_empty(
    db: Engine, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's order: `init-db` made a new, empty store; the reader is told so, not
    "unknown room 'dm-dan'" or "unknown user 42"."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    url = settings_mod.current().database_url
    assert f"the store {url} is empty: no users or rooms yet" in err
    assert "unknown" not in err


@pytest.mark.processes  # starts `memory-worker serve`
def test_serve_without_a_user_on_an_empty_store_says_so_in_its_banner(db: Engine) -> None:
    from tests.web_server import serve

    with serve(settings_mod.current()) as served:
        banner = "".join(served.output)
    assert f"(store {settings_mod.current().database_url} — empty: no users or rooms yet" in banner
    assert "scope: proven (groups hear world facts only" in banner  # said at start, as a worker


def test_an_unknown_database_is_named_with_its_fix(
    settings_of: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    url = os.environ.get("MW_TEST_DATABASE_URL")
    if not url:
        pytest.skip("needs a PostgreSQL server: set MW_TEST_DATABASE_URL")
    missing = make_url(url).set(database="mw_no_such_database", password=PASSWORD)
    settings_of(database_url=missing.render_as_string(hide_password=False))
    assert cli.main(["parked"]) == 2
    err = capsys.readouterr().err
    assert "names a database the server does not have ('mw_no_such_database')" in err, err
    assert "createdb mw_no_such_database" in err and PASSWORD not in err


def test_a_missing_sqlite_file_is_named_with_its_fix(
    tmp_path: Path, settings_of: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    settings_of(database_url=f"sqlite:///{tmp_path / 'nowhere.db'}")
    assert cli.main(["parked"]) == 2
    assert "no store at" in capsys.readouterr().err
    assert not (tmp_path / "nowhere.db").exists()


# --- no secret on any output -------------------------------------------------------------------


@dataclass
class Ran:
    argv: list[str]
    code: int | None
    output: str


def _command() -> list[str]:
    script = Path(sys.executable).with_name("memory-worker")
    return [str(script)] if script.exists() else [sys.executable, "-m", "memory_worker.cli"]


def run(argv: list[str], env: dict[str, str], cwd: Path) -> Ran:
    done = subprocess.run(
        [*_command(), *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    return Ran(argv, done.returncode, done.stdout + done.stderr)


def run_until(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    ready: str,
    then: Callable[[], None] = lambda: None,
) -> Ran:
    """A long-running command: started, read until it prints `ready` (and `then` returns),
    stopped with SIGTERM."""
    proc = subprocess.Popen(
        [*_command(), *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if ready in line:
                then()
                break
        os.killpg(proc.pid, signal.SIGTERM)
        rest, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Ran(argv, proc.returncode, "".join(lines))


def _until_a_worker_answers(broker_url: str) -> None:
    """A worker on this broker answers a ping: it is consuming, its stop handlers in place."""
    from celery import Celery

    probe = Celery("probe", broker=broker_url)
    try:
        for _ in range(int(RUN_TIMEOUT_S)):
            if probe.control.ping(timeout=1.0):
                return
        raise AssertionError("no worker answered a ping")
    finally:
        probe.close()


@pytest.fixture
def planted_redis(tmp_path: Path) -> Iterator[str]:
    """A real Redis whose password is the planted one (the embedded server, told it)."""
    state = tmp_path / "redis"
    state.mkdir()
    (state / "redis.json").write_text(json.dumps({"port": closed_port(), "password": PASSWORD}))
    url = embedded.ensure_running(state)
    assert PASSWORD in url
    yield url
    embedded.stop(state)


@pytest.mark.processes  # some twenty commands, each its own interpreter: out of make check
def test_no_command_prints_a_password_from_the_database_or_broker_url(
    db: Engine, tmp_path: Path, planted_redis: str
) -> None:
    """Every subcommand, its normal path and its error paths, as a deployer runs it."""
    scenes.people(db)
    scenes.private_chat(db)
    store_url = make_url(settings_mod.current().database_url)
    if store_url.get_backend_name() == "postgresql" and not store_url.password:
        store_url = store_url.set(password=PASSWORD)  # planted (a trusting server ignores it)
    secrets = {PASSWORD, store_url.password} - {None}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI"))}
    good = {
        **clean,
        # a SQLite URL holds no password: then the broker's and the error paths' are planted
        "MW_DATABASE_URL": store_url.render_as_string(hide_password=False),
        "MW_BROKER_URL": planted_redis,
        "MW_CASSETTE": str(CASSETTE),
        "MW_STATE_DIR": str(tmp_path / "state"),
        "MW_WEB_SECRET": "w" * 40,
    }
    refused = {**good, "MW_DATABASE_URL": refused_store()}
    no_broker = {**good, "MW_BROKER_URL": f"redis://:{PASSWORD}@127.0.0.1:{closed_port()}/0"}
    bad_setting = {**good, "MW_DATABASE_URL": f"mysql://mwuser:{PASSWORD}@db.example/mw"}
    sqlite_password = {**good, "MW_DATABASE_URL": f"sqlite://mwuser:{PASSWORD}@/memory.db"}
    miss, answer = tmp_path / "miss.json", tmp_path / "answer.json"
    miss.write_text(json.dumps({"fingerprint": "f" * 16, "purpose": "extract"}))
    answer.write_text(json.dumps({"memories": []}))
    block = ["block", "--persona", "warren", "--present", "42", "--room", "dm-dan"]
    no_cassette = {k: v for k, v in good.items() if k != "MW_CASSETTE"}
    answered = ["cassette-answer", str(miss), str(answer)]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = str(holder.getsockname()[1])
        cases = [  # (environment, command, the exit code that shows it took that path)
            (good, ["init-db"], 0),
            (good, ["check"], 0),
            (good, block, 0),
            (good, ["parked"], 0),
            (good, ["sweep"], 0),
            (good, ["reembed"], 0),
            (good, [*answered, "--cassette", "written.json"], 0),
            (no_cassette, answered, 2),
            (good, ["serve", "--user", "42", "--port", taken], 2),
            (good, ["serve", "--user", "999", "--port", "0"], 2),
            *[(refused, argv, 2) for argv in (["init-db"], block, ["parked"], ["sweep"])],
            (refused, ["reembed"], 2),
            (refused, ["serve", "--port", "0"], 2),
            (refused, ["check"], 1),
            (no_broker, ["check"], 1),
            *[(bad_setting, argv, 2) for argv in (["check"], ["parked"], ["serve"])],
            (sqlite_password, ["init-db"], 2),
        ]
        # init-db first; the rest at once (each its own interpreter, most of their time its
        # imports), their results in the order of `cases`
        (env, argv, code), rest = cases[0], cases[1:]
        ran = [(run(argv, env, tmp_path), code)]
        with ThreadPoolExecutor(max_workers=4) as pool:
            ran += pool.map(lambda case: (run(case[1], case[0], tmp_path), case[2]), rest)
    # the long-running two are stopped as soon as they are up: how they exit is not the point
    ran.append(
        (run_until(["serve", "--user", "42", "--port", "0"], good, tmp_path, "sign in"), None)
    )
    procfile = ["run", "--procfile", str(ROOT / "Procfile"), "commit"]
    worker_env = {**good, "MW_METRICS_PORT_COMMIT": str(closed_port())}
    answers = lambda: _until_a_worker_answers(planted_redis)  # noqa: E731
    ran.append((run_until(procfile, worker_env, tmp_path, "exchange=commit", answers), None))
    for r, code in ran:
        assert r.output.strip(), f"{r.argv} printed nothing"
        if r.argv[0] != "run":  # a worker run as root is warned by Celery, rightly
            assert "warning" not in r.output.lower(), f"{r.argv} warned:\n{r.output}"
        for secret in secrets:
            assert secret not in r.output, f"{r.argv} printed a password:\n{r.output}"
        assert code is None or r.code == code, f"{r.argv} exited {r.code}, not {code}:\n{r.output}"
    assert ":***@" in ran[1][0].output  # check showed the broker's URL, redacted
    worker = ran[-1][0].output
    # the single writer's banner tells the truth, and an idle worker stops without a wait
    assert "concurrency: 1 (solo)" in worker, worker
    assert "Initiating Soft Shutdown" not in worker, worker
    assert "Invalid -W option" not in worker, worker
    assert "| stopped" in worker, worker
