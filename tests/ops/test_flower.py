"""Flower on a fresh machine: `memory-worker run` makes its credentials once, keeps them in the
state folder, prints them that once, and Flower answers on loopback with them at once."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tenacity import Retrying, stop_after_delay, wait_fixed

from memory_worker.ops import flower
from tests.ops.test_procfile import free_port, get
from tests.worker import spare_database

REPO = Path(__file__).resolve().parents[2]
PRINTED = re.compile(r"flower: (http://127\.0\.0\.1:\d+/) user (\S+) password (\S+) ")


def test_the_credentials_are_made_once_kept_for_this_user_only_and_reused(tmp_path: Path) -> None:
    made = flower.credentials(tmp_path, {})
    assert made is not None and made.made_now and len(made.password) >= 20
    mode = stat.S_IMODE((tmp_path / flower.FILE).stat().st_mode)
    assert mode == 0o600, oct(mode)
    again = flower.credentials(tmp_path, {})
    assert again is not None and not again.made_now
    assert (again.user, again.password) == (made.user, made.password)


def test_the_deployer_s_own_credentials_win_and_nothing_is_made(tmp_path: Path) -> None:
    assert flower.credentials(tmp_path, {"FLOWER_USER": "ops", "FLOWER_PASSWORD": "x"}) is None
    assert not (tmp_path / flower.FILE).exists()


def run_flower(cwd: Path, env: dict[str, str], lines: list[str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_worker.cli", "run", "flower"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: lines.extend(stdout), daemon=True).start()
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


@pytest.mark.pipeline
@pytest.mark.slow
def test_run_on_a_fresh_machine_brings_flower_up_on_loopback_with_the_printed_credentials(
    tmp_path: Path, redis_url: str
) -> None:
    for name in ("Procfile", "flowerconfig.py"):
        shutil.copy(REPO / name, tmp_path / name)
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "FLOWER"))}
    env = {**clean, "REDIS_URL": spare_database(redis_url, 1), "FLOWER_PORT": str(port)}
    lines: list[str] = []
    proc = run_flower(tmp_path, env, lines)
    try:
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.5), reraise=True):
            with attempt:
                printed = PRINTED.search("".join(lines))
                assert printed is not None, "".join(lines)
                url, user, password = printed.groups()
                assert url == f"http://127.0.0.1:{port}/"
                assert get(url, (user, password)) == 200
        assert get(url, (user, "wrong")) == 401
    finally:
        stop(proc)
    said = "".join(lines)
    assert " ERROR" not in said and "Traceback" not in said, said
    assert "left down" not in said, said

    lines.clear()  # the second run reads the kept pair and prints no password
    proc = run_flower(tmp_path, env, lines)
    try:
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.5), reraise=True):
            with attempt:
                assert get(url, (user, password)) == 200
    finally:
        stop(proc)
    assert password not in "".join(lines)
