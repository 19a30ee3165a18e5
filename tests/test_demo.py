"""`make demo` keeps working: the whole demo, as a user runs it, in a fresh folder.

It also guards the demo's cassette: a prompt change that is not re-recorded is a replay miss,
and the demo stops on the parked spell.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_demo_runs_both_spells_through_a_real_worker_and_shows_the_blocks(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "GEMINI", "REDIS"))}
    env["COLUMNS"] = "80"  # a default terminal: the demo must read well in it
    out = subprocess.run(
        [sys.executable, "-m", "memory_worker.cli", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    for noise in ("Warning", "Invalid -W", "Traceback", "shutdown"):
        assert noise not in text + out.stderr, f"the demo printed {noise!r}"
    assert "u:42 owns a flat in Xuhui" in text  # the memory's text wraps, it is not squeezed
    assert text.count("committed rows") == 2
    assert "Warren noted: Dan owns a flat in Xuhui" in text
    assert "2026-07 → 2026-08" in text  # the flat's closed arc, as block.span writes it
    assert "group room with Dan and Cara" in text
    group_block = text.split("group room with Dan and Cara")[1]
    assert "Nolan's Odyssey" in text.split("group room with Dan and Cara")[0]  # Dan's chat
    assert "Nolan's Odyssey" not in group_block and "u:42" not in group_block  # Dan's news
    assert "memory-worker serve --user 42" in text  # the page, for the human side
    # ...as a command that works from the folder it was run in (a path from there, or a name
    # on PATH), not `.venv/bin/…` of the project's folder
    shown = text.rsplit("\n  ", 1)[1].split()
    assert shown[1:] == ["serve", "--user", "42"], shown
    assert (tmp_path / shown[0]).is_file() or shutil.which(shown[0], path=env["PATH"])
    # One clock: the lines and the rows written from them carry the same date (the page says
    # a row was noted the day its evidence was said).
    kept = sqlite3.connect(tmp_path / ".memory_worker" / "demo" / "demo.db")
    with closing(kept):
        said = {d for (d,) in kept.execute("SELECT substr(created, 1, 10) FROM lines")}
        noted = {d for (d,) in kept.execute("SELECT substr(created, 1, 10) FROM persona_memory")}
    assert said == noted == {"2026-08-18"}, (said, noted)
    assert not (tmp_path / ".memory_worker" / "demo" / "redis" / "redis.json").exists()
