"""The operator's side: `memory-worker check` on good and bad configs, config that fails at
start naming the variable, passwords never printed, alembic on the configured URL, and the
supervisor that runs the Procfile."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
from tenacity import Retrying, stop_after_delay, wait_fixed

from memory_worker import demo
from memory_worker.storage import store

# Every test here runs the CLI, a worker, beat or the supervisor as processes.
pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "memory_worker.cli"]


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    return subprocess.run(
        [*CLI, *args], env={**clean, **env}, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def good_env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    store.init_db(url)
    return {"MW_DATABASE_URL": url, "REDIS_URL": redis_url, "MW_CASSETTE": str(demo.CASSETTE)}


def test_check_passes_on_a_good_config_and_shows_no_password(
    good_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    out = run_cli(["check"], good_env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for what in ("store", "broker", "provider", "rate limits"):
        assert f"ok    {what}" in out.stdout
    password = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs.get("password")
    if password:
        assert password not in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"MW_DATABASE_URL": "sqlite:///{tmp}/never.db"},
            "not initialised: run `memory-worker init-db`",
        ),
        ({"MW_PROVIDER": "gemini"}, "MW_PROVIDER=gemini needs GEMINI_API_KEY"),
        ({"MW_CASSETTE": "{tmp}/missing.json"}, "MW_CASSETTE: no such file"),
        ({"REDIS_URL": "redis://:pw-in-url@127.0.0.1:1/0"}, "redis://:***@127.0.0.1:1/0"),
    ],
)
def test_check_fails_on_each_problem_and_says_what_to_do(
    good_env: dict[str, str], tmp_path: Path, change: dict[str, str], says: str
) -> None:
    env = {**good_env, **{k: v.format(tmp=tmp_path) for k, v in change.items()}}
    out = run_cli(["check"], env, tmp_path)
    assert out.returncode == 1, out.stdout
    assert says in out.stdout
    assert "pw-in-url" not in out.stdout + out.stderr


def test_a_bad_variable_stops_every_command_naming_it(
    good_env: dict[str, str], tmp_path: Path
) -> None:
    out = run_cli(["parked"], {**good_env, "MW_MODEL_TIMEOUT_MS": "0"}, tmp_path)
    assert out.returncode == 2
    assert "MW_MODEL_TIMEOUT_MS: Input should be greater than 0" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_store_never_initialised_says_run_init_db_not_a_traceback(
    good_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**good_env, "MW_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}"}
    out = run_cli(["parked"], env, tmp_path)
    assert out.returncode == 2
    assert "run `memory-worker init-db`" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "empty.db").exists(), "a read command created the store"
    (tmp_path / "empty.db").touch()  # a file that is there but was never migrated
    out = run_cli(["parked"], env, tmp_path)
    assert out.returncode == 2
    assert "not initialised: run `memory-worker init-db`" in out.stderr
    assert "Traceback" not in out.stderr


def test_init_db_never_prints_the_database_password(tmp_path: Path) -> None:
    env = {"DATABASE_URL": "postgres://postgres:hunter2secret@127.0.0.1:1/test"}
    out = run_cli(["init-db"], env, tmp_path)
    assert out.returncode != 0
    assert "hunter2secret" not in out.stdout + out.stderr


def test_a_worker_with_a_bad_config_refuses_to_start_naming_what_is_missing(
    good_env: dict[str, str], tmp_path: Path
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    env = {**clean, **good_env, "MW_PROVIDER": "gemini"}
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "memory_worker.tasks.celery_app",
        "worker",
        "--pool",
        "solo",
    ]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "MW_PROVIDER=gemini needs GEMINI_API_KEY" in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("setting", "named"),
    [("MW_SWEEP_LAG_S=-1", "MW_SWEEP_LAG_S: "), ("MW_MODEL_CALLS_PER_SECOND=10", "MW_MODEL_RPM")],
)
@pytest.mark.parametrize("process", ["worker", "beat"])
def test_a_bad_setting_stops_a_worker_or_beat_with_one_line_and_no_traceback(
    good_env: dict[str, str], tmp_path: Path, setting: str, named: str, process: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    name, _, value = setting.partition("=")
    env = {**clean, **good_env, name: value}
    cmd = [sys.executable, "-m", "celery", "-A", "memory_worker.tasks.celery_app", process]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    said = (out.stdout + out.stderr).strip().splitlines()
    assert len(said) == 1 and said[0].startswith("memory-worker: invalid configuration: ")
    assert named in said[0] and "Traceback" not in out.stderr


def test_alembic_from_the_command_line_migrates_the_configured_store(tmp_path: Path) -> None:
    target = tmp_path / "configured.db"
    env = {**os.environ, "MW_DATABASE_URL": f"sqlite:///{target}"}
    alembic = Path(sys.executable).parent / "alembic"
    subprocess.run(
        [str(alembic), "-c", str(REPO / "schema" / "alembic.ini"), "upgrade", "head"],
        env=env,
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert target.exists() and not (tmp_path / "memory_worker.db").exists()
    from memory_worker import check

    check.require_migrated(f"sqlite:///{target}")


# --- the supervisor ---------------------------------------------------------------------------


def supervise(
    procfile: Path, env: dict[str, str], cwd: Path, stop_timeout: float
) -> tuple[subprocess.Popen[str], list[str], threading.Thread]:
    """`memory-worker run` on `procfile`, its output collected line by line as it comes."""
    proc = subprocess.Popen(
        [*CLI, "run", "--procfile", str(procfile), "--stop-timeout", str(stop_timeout)],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read)
    reader.start()
    return proc, lines, reader


STUBBORN = f"117.{os.getpid()}"  # this run's own: another engineer's run has another
STEADY = f"118.{os.getpid()}"


def a_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    store.init_db(url)
    return url


def test_the_supervisor_restarts_a_dead_process_and_a_crash_loop_stops_the_whole_run(
    tmp_path: Path,
) -> None:
    """Half a system is no system: a process that keeps dying at start stops the others,
    with its last line as the reason, and the run exits 1."""
    procfile = tmp_path / "Procfile"
    marks = tmp_path / "starts"
    started = f"$(cat {marks} 2>/dev/null | wc -l)"
    procfile.write_text(  # steady dies twice, then stays; broken breaks after that, always
        f"# comment\nsteady: echo x >> {marks}; [ {started} -ge 3 ] && exec sleep {STEADY}; "
        "sleep 1; exit 0\n"
        f"broken: until [ {started} -ge 3 ]; do sleep 0.1; done; echo 'no disk: gone' >&2; "
        "exit 3\n"
        f"stubborn: trap '' TERM; sleep {STUBBORN}\n"
    )
    env = {
        **os.environ,
        "MW_DATABASE_URL": a_store(tmp_path),
        "MW_STATE_DIR": str(tmp_path / "state"),
        "REDIS_URL": "redis://127.0.0.1:1/0",
        # the shipped backoff at a tenth: waits of 0.1, 0.2, 0.4 and 0.8 s (1 to 8 s)
        "MW_RESTART_BACKOFF_S": "0.05",
    }
    proc, lines, reader = supervise(procfile, env, tmp_path, stop_timeout=2)
    try:
        proc.wait(timeout=120)  # it stops by itself
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        reader.join()
    assert proc.returncode == 1, lines
    assert len(marks.read_text().split()) == 3  # steady was started again, twice
    assert "run      | broken exited 3; starting it again in 0.1s\n" in lines  # the setting
    reason = "broken exited 3 5 times within 10s of starting: no disk: gone"
    assert f"run      | {reason}: stopping everything\n" in lines
    assert f"error: {reason}\n" in lines
    assert "run      | stubborn did not stop within 2s: killed\n" in lines  # ignored SIGTERM
    assert (tmp_path / "state").is_dir()
    for mark in (STUBBORN, STEADY):
        left = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True)
        assert left.stdout.strip() == ""


def test_run_without_a_store_starts_nothing_and_names_init_db(tmp_path: Path) -> None:
    out = run_cli(["run", "--procfile", str(REPO / "Procfile")], {}, tmp_path)
    assert out.returncode == 2
    assert out.stderr == "error: no store at memory_worker.db: run `memory-worker init-db` first\n"
    assert out.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_second_run_in_the_same_folder_is_refused_with_the_first_ones_pid(
    tmp_path: Path,
) -> None:
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"idle: exec sleep {STEADY}\n")
    env = {**os.environ, "MW_DATABASE_URL": a_store(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0"}
    first, lines, reader = supervise(procfile, env, tmp_path, stop_timeout=5)
    try:
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.2), reraise=True):
            with attempt:
                assert any("started idle" in line for line in lines)
        second = subprocess.run(
            [*CLI, "run", "--procfile", str(procfile)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
        reader.join()
    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr.startswith(
        f"error: `memory-worker run` is already running here (pid {first.pid}, in "
    ), second.stderr
    assert second.stderr.count("\n") == 1
    assert first.returncode == 0
    assert sum("started idle" in line for line in lines) == 1  # the second started nothing


def test_a_marker_naming_a_process_that_is_no_run_does_not_refuse_the_next_run(
    tmp_path: Path,
) -> None:
    """A run killed with SIGKILL leaves its marker; its pid may since name another process."""
    state = tmp_path / ".memory_worker"
    state.mkdir()
    (state / "supervisor.pid").write_text(str(os.getpid()))  # alive, and no `run`
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"idle: exec sleep {STEADY}\n")
    env = {**os.environ, "MW_DATABASE_URL": a_store(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0"}
    env.pop("MW_STATE_DIR", None)
    proc, lines, reader = supervise(procfile, env, tmp_path, stop_timeout=5)
    try:
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.2), reraise=True):
            with attempt:
                assert any("started idle" in line for line in lines), lines
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.join()
    assert proc.returncode == 0, lines


def test_the_supervisor_restarts_a_worker_that_is_up_but_answers_no_ping(
    good_env: dict[str, str], tmp_path: Path, redis_url: str
) -> None:
    """A worker that could not consume once stayed up and the supervisor did not notice.
    Here the worker is frozen (SIGSTOP): alive to `poll()`, deaf to the broker."""
    from tests.worker import spare_database

    node = f"live{os.getpid()}@%h"
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "w: exec celery -A memory_worker.tasks.celery_app worker -Q events --pool solo "
        f"--hostname {node} --without-mingle --without-gossip --loglevel WARNING\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    env = {
        **clean,
        **good_env,
        "REDIS_URL": spare_database(redis_url, 5),
        "MW_STATE_DIR": str(tmp_path / "state"),
        "MW_LIVENESS_EVERY_S": "1",
    }
    proc, lines, reader = supervise(procfile, env, tmp_path, stop_timeout=5)
    started = re.compile(r"started w \(pid (\d+)\)")
    try:
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.2), reraise=True):
            with attempt:  # up and answering the supervisor: only then is freezing it a test
                assert any(ln.startswith("run | w answers pings as live") for ln in lines)
        first = int(next(m.group(1) for ln in lines if (m := started.search(ln))))
        os.killpg(first, signal.SIGSTOP)
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.2), reraise=True):
            with attempt:
                assert "run | w answered no ping 3 times: restarting it\n" in lines
                assert len([ln for ln in lines if started.search(ln)]) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        reader.join()


def test_ctrl_c_on_run_is_a_soft_shutdown_said_once_without_celerys_banners(
    tmp_path: Path,
) -> None:
    """The shipped Procfile (its workers, beat and Flower), stopped as a person stops it:
    SIGINT to the supervisor. What a deployer should act on is said once (running as root);
    Celery's per-worker banners and its "Cold shutdown" lines for this stop are not."""
    from tests.test_cli_output import closed_port

    for name in ("Procfile", "flowerconfig.py"):
        (tmp_path / name).write_text((REPO / name).read_text())
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MW_", "REDIS", "FLOWER"))},
        "MW_DATABASE_URL": a_store(tmp_path),
        "MW_CASSETTE": str(demo.CASSETTE),
        "MW_LIVENESS_EVERY_S": "1",
        "FLOWER_PORT": str(closed_port()),
        **{f"MW_METRICS_PORT_{n}": str(closed_port()) for n in ("MODEL", "COMMIT", "EVENTS")},
    }
    proc = subprocess.Popen(
        [*CLI, "run"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # until every worker answers a ping: each is up, and
            lines.append(line)  # Flower has inspected them (it does so as it starts)
            if sum("answers pings as" in ln for ln in lines) == 3:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = "".join(lines) + rest
    assert proc.returncode == 0, said[-3000:]
    assert said.count("run    | stopping: no new work;") == 1, said[-3000:]
    assert said.rstrip().endswith("run    | stopped"), said[-3000:]
    for noise in ("Cold shutdown", "Hitting Ctrl+C", "SecurityWarning", "Inspect method"):
        assert noise not in said, f"{noise!r} in:\n{said[-3000:]}"
    root = "warning: the workers run as root"
    assert said.count(root) == (1 if os.geteuid() == 0 else 0)
