"""The README is true word for word: its shell commands, run in order, in a fresh copy.

Every line of every ```sh block of README.md, and of the docs it leads to (WALKED), runs as
written, in order, in a copy of the repository's tracked files (what a clone holds) whose
`.venv` is this test's environment. A command must exit 0 and print no traceback;
`. .venv/bin/activate` and `export` carry over to the lines after them, as in one shell. Two
kinds of line are not run as written, each for a reason kept in SKIPPED or LONG_RUNNING:

* `make test` — this test runs inside it;
* the benchmarks — minutes each (`make bench` runs them): their `--help` runs instead;
* long-running commands (`memory-worker run`, `memory-worker serve`) start, are waited on
  until they serve, and are stopped with SIGTERM: they must stop cleanly.

Around the commands: no `memory_worker.db` appears before the README creates one on purpose
(`memory-worker init-db`), and nothing the commands started is left running.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = {
    "make test": "this test runs inside `make test`",
    **dict.fromkeys(  # the same steps `make install` runs before this test can run at all
        (
            "python3 -m venv /tmp/mw-deploy",
            "/tmp/mw-deploy/bin/pip install --quiet --no-deps --require-hashes"
            " -r requirements/runtime.txt",
            "/tmp/mw-deploy/bin/pip install --quiet --no-deps --no-build-isolation .",
            "/tmp/mw-deploy/bin/pip check",
            "/tmp/mw-deploy/bin/python requirements/verify.py requirements/runtime.txt",
        ),
        "a deployer's install from the lock: `make install` runs the same steps for .venv",
    ),
}
BENCHMARK = re.compile(r"^\.venv/bin/python benchmarks/\S+\.py$")
LONG_RUNNING = {  # command (after its VAR=value words) → a line it prints once it serves
    "memory-worker run": re.compile(r"^run\s+\| started flower"),
    ".venv/bin/memory-worker serve": re.compile(r"sign in as u:\d+"),
    "memory-worker serve": re.compile(r"sign in as u:\d+"),
}
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def without_assignments(command: str) -> str:
    words = shlex.split(command)
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)
    return shlex.join(words)


COMMAND_TIMEOUT_S = 300


# The README's quick start, then the docs it sends a reader to next that show commands, in the
# order a new user meets them: the quick start reads the demo's store before running.md makes
# a store of its own (`memory-worker init-db`).
WALKED = ("README.md", "docs/reading.md", "docs/running.md", "docs/testing.md")


def readme_commands() -> list[str]:
    """Each command line of the ```sh blocks of WALKED, in order, comments dropped."""
    text = "\n".join((ROOT / name).read_text() for name in WALKED)
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                out.append(command)
    return out


@dataclass
class Shell:
    """One shell's worth of state: the folder, and the environment lines leave behind."""

    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def source_activate(self) -> None:
        venv = self.cwd / ".venv"
        self.env["VIRTUAL_ENV"] = str(venv)
        self.env["PATH"] = f"{venv / 'bin'}{os.pathsep}{self.env['PATH']}"

    def export(self, command: str) -> None:
        for word in shlex.split(command)[1:]:
            name, _, value = word.partition("=")
            self.env[name] = value

    def run(self, command: str) -> str:
        out = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        said = out.stdout + out.stderr
        self.log.append(f"$ {command}\n{said}")
        assert out.returncode == 0, f"`{command}` exited {out.returncode}:\n{said[-3000:]}"
        assert "Traceback" not in said, f"`{command}` printed a traceback:\n{said[-3000:]}"
        return said

    def run_until_ready(self, command: str, ready: re.Pattern[str]) -> str:
        """Start a long-running command, wait for its ready line, stop it with SIGTERM."""
        words = shlex.split(command)
        assigned = {}
        while words and ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            assigned[name] = value
        proc = subprocess.Popen(  # exec: SIGTERM reaches the command itself, as from a shell
            ["bash", "-c", f"exec {shlex.join(words)}"],
            cwd=self.cwd,
            env={**self.env, **assigned},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        assert proc.stdout is not None
        lines: list[str] = []
        try:
            deadline = time.monotonic() + COMMAND_TIMEOUT_S
            for line in proc.stdout:
                lines.append(line)
                if ready.search(line):
                    break
                assert time.monotonic() < deadline, f"`{command}` never got ready"
            else:
                raise AssertionError(f"`{command}` exited before it was ready:\n{''.join(lines)}")
            if without_assignments(command).startswith("memory-worker run"):
                self.wait_for_a_worker()
            if (url := re.search(r"serve: (http://\S+/)", "".join(lines))) is not None:
                wait_for_http(url.group(1))
            os.killpg(proc.pid, signal.SIGTERM)
            rest, _ = proc.communicate(timeout=120)
            lines.append(rest)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        said = "".join(lines)
        self.log.append(f"$ {command}  (stopped with SIGTERM)\n{said}")
        # 0, or uvicorn's way: after a graceful shutdown it re-raises the SIGTERM it caught
        clean = (0, -signal.SIGTERM)
        assert proc.returncode in clean, f"`{command}` did not stop cleanly:\n{said[-3000:]}"
        assert "Traceback" not in said, f"`{command}` printed a traceback:\n{said[-3000:]}"
        return said

    def wait_for_a_worker(self) -> None:
        """A worker started by `memory-worker run` answers a ping over the broker."""
        ping = (
            "from memory_worker.tasks.celery_app import app\n"
            "import sys; sys.exit(0 if app.control.ping(timeout=1) else 1)"
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            out = subprocess.run(
                [str(self.cwd / ".venv" / "bin" / "python"), "-c", ping],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                timeout=60,
            )
            if out.returncode == 0:
                return
        raise AssertionError("no worker of `memory-worker run` answered a ping")


def wait_for_http(url: str) -> None:
    """Until `url` answers at all (the server is up, its signal handlers installed)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # an answer, if not a 200
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing answered at {url}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fresh_copy(tmp_path: Path) -> Iterator[Path]:
    """The tracked files as a clone holds them, with this environment as its `.venv`."""
    copy = tmp_path / "clone"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    venv = Path(sys.prefix)
    (copy / ".venv").symlink_to(venv)
    stamp = venv / ".installed"
    if stamp.exists():  # make must see the environment as installed from these files
        before = stamp.stat().st_mtime - 60
        for made_from in ("pyproject.toml", "requirements/test.txt"):
            os.utime(copy / made_from, (before, before))
    yield copy
    _stop_what_was_left(copy)


def _processes_in(folder: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).is_relative_to(folder):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _stop_what_was_left(folder: Path) -> None:
    for pid in _processes_in(folder):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_every_command_the_readme_shows_works_as_written_in_order(fresh_copy: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "REDIS", "GEMINI"))}
    env["COLUMNS"] = "80"
    for name in ("MODEL", "COMMIT", "EVENTS"):  # the Procfile's metrics ports, free ones here
        env[f"MW_METRICS_PORT_{name}"] = str(_free_port())
    shell = Shell(fresh_copy, env)
    commands = readme_commands()
    assert "make demo" in commands and "memory-worker --help" in commands
    store_made = False
    helped: set[str] = set()
    for i, command in enumerate(commands):
        if command in SKIPPED:
            continue
        if command == ". .venv/bin/activate":
            shell.source_activate()
        elif command.startswith("export "):
            shell.export(command)
        elif BENCHMARK.match(command):
            if command in helped:
                continue
            # a run of benchmark lines at once: `--help` changes nothing, so their order cannot
            run = list(itertools.takewhile(BENCHMARK.match, commands[i:]))
            with ThreadPoolExecutor(max_workers=len(run)) as pool:
                for said in pool.map(shell.run, [f"{c} --help" for c in run]):
                    assert "usage:" in said
            helped.update(run)
        elif ready := next(
            (r for p, r in LONG_RUNNING.items() if without_assignments(command).startswith(p)), None
        ):
            shell.run_until_ready(command, ready)
        else:
            said = shell.run(command)
            if command.startswith("memory-worker block"):
                assert "chars" in said and "u:42" in said, said  # the demo's store, found
        store_made = store_made or command == "memory-worker init-db"
        if not store_made:
            assert not (fresh_copy / "memory_worker.db").exists(), f"`{command}` made a store"
    left = _processes_in(fresh_copy)
    assert not left, f"processes left running in the copy: {left}"
