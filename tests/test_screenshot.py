"""The README's picture is made by one command from the demo's store (`make screenshot`
runs it after a fresh demo): docs/screenshot.py serves a copy of the store, signs in as Dan
in Debian's Chromium and takes the page."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "docs" / "screenshot.py"
CHROMIUM = Path("/usr/bin/chromium")


def run(argv: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )  # fmt: skip


@pytest.mark.processes
def test_without_the_demo_store_the_command_says_to_run_make_demo(tmp_path: Path) -> None:
    done = run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "page.png")], tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: no demo store at .memory_worker/demo/demo.db: run `make demo` first\n"
    )
    assert not (tmp_path / "page.png").exists()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium: `apt-get install -y chromium`")
def test_the_screenshot_command_takes_dans_page_from_the_demo_store(tmp_path: Path) -> None:
    demo = run([sys.executable, "-m", "memory_worker.cli", "demo"], tmp_path)
    assert demo.returncode == 0, demo.stderr[-2000:]
    kept = tmp_path / ".memory_worker" / "demo" / "demo.db"
    before = kept.read_bytes()
    out = tmp_path / "page.png"
    done = run([sys.executable, str(SCRIPT), "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout == f"wrote {out}\n" and "Traceback" not in done.stderr
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width == 1200 and height > 900  # the whole page, not the window
    assert kept.read_bytes() == before  # a copy was served: the demo's store is as it was
