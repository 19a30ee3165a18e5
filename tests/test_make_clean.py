"""`make clean` stops the embedded Redis a run left behind before it removes its folder."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from memory_worker.ops import embedded

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_clean_stops_an_embedded_redis_left_running(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    state = tmp_path / ".memory_worker" / "demo" / "redis"
    embedded.ensure_running(state)  # not owned: as if its owner had been killed
    pid = int((state / "redis.pid").read_text())
    assert Path(f"/proc/{pid}").exists()
    try:
        out = subprocess.run(
            ["make", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert f"stopped the embedded redis-server {pid}" in out.stdout
        assert not (tmp_path / ".memory_worker").exists()
        for _ in range(250):  # redis exits at once on SIGTERM; allow a loaded machine 5 s
            status = Path(f"/proc/{pid}/status")
            if not status.exists() or "zombie" in status.read_text():
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"redis-server {pid} still runs after make clean")
    finally:
        if Path(f"/proc/{pid}").exists():
            subprocess.run(["kill", str(pid)], check=False)
