"""docs/page.png: Dan's page after `make demo`, as the README shows it (`make screenshot`).

A copy of the demo's store (the page's sign-in writes a session; the demo's store stays as the
demo left it) is served by a real `memory-worker serve --user 42` on a loopback port, and
Debian's Chromium, driven by Playwright as the browser tests drive it, signs in through the
printed link, opens the evidence of the newest line and takes the whole page.

    .venv/bin/python docs/screenshot.py [--store F] [--out docs/page.png]

Needs the demo's store (`make demo`) and /usr/bin/chromium (`apt-get install -y chromium`);
without either it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
from contextlib import closing
from pathlib import Path

from memory_worker.core.settings import Settings
from memory_worker.demo import DAN, demo_store

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
VIEWPORT = {"width": 1200, "height": 900}
STEP_TIMEOUT_MS = 30_000  # a busy machine


def copy_store(source: Path, target: Path) -> None:
    """A consistent copy, whatever the demo's write-ahead log still holds (SQLite's backup)."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def serve(store: Path, state: Path) -> tuple[subprocess.Popen[str], str]:
    """`memory-worker serve --user 42` on the copy; the one-time sign-in link it prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MW_")}
    env |= {"MW_DATABASE_URL": f"sqlite:///{store}", "MW_STATE_DIR": str(state)}
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("memory-worker")), "serve", "--user", str(DAN)]
        + ["--port", "0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        said.append(line)
        if "/login?token=" in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drained
            return proc, line.split(": ", 1)[1].strip()
    raise SystemExit(f"error: serve did not start (exit {proc.wait()}):\n{''.join(said)}")


def shoot(link: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            page.set_default_timeout(STEP_TIMEOUT_MS)
            page.goto(link)
            page.wait_for_selector("#rail[data-connected='1']", state="attached")
            page.locator("details summary").first.click()  # the newest line's evidence
            page.wait_for_selector("details[open] .evidence")
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--store",
        type=Path,
        default=demo_store(Settings.from_env()),
        help="the demo's store (default: where `make demo` left it)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "page.png", help="the PNG")
    a = p.parse_args(argv)
    if not a.store.is_file():
        print(f"error: no demo store at {a.store}: run `make demo` first", file=sys.stderr)
        return 2
    if not CHROMIUM.exists():
        print(f"error: no {CHROMIUM}: `apt-get install -y chromium`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mw-screenshot-") as tmp:
        copy = Path(tmp) / "page.db"
        copy_store(a.store, copy)
        proc, link = serve(copy, Path(tmp) / "state")
        try:
            shoot(link, a.out)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
