"""The contributor's habits hold together: `make help` lists every target with what it does,
and the pre-commit hooks run what `make check` runs, from the project's .venv."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()
VENV_BIN = "$(BIN)/"


def phony_targets() -> list[str]:
    line = next(ln for ln in MAKEFILE.splitlines() if ln.startswith(".PHONY:"))
    return line.split(":", 1)[1].split()


def recipe(target: str) -> list[str]:
    """The commands of `target`'s rule, as written (tabs stripped)."""
    m = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert m, f"no rule for {target}"
    return [ln.strip() for ln in m.group(1).splitlines()]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_help_lists_every_target_with_a_line_saying_what_it_does() -> None:
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    described = {}
    for line in out.stdout.splitlines():
        name, _, what = line.strip().partition(" ")
        described[name] = what.strip()
    missing = [t for t in phony_targets() if not described.get(t)]
    assert not missing, f"targets without a '## …' note: {missing}"


def test_the_pre_commit_hooks_run_the_commands_make_check_runs_from_the_venv() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [h for repo in config["repos"] for h in repo["hooks"]]
    assert all(repo["repo"] == "local" for repo in config["repos"]), "no hook repo to fetch"
    on_commit = [
        h["entry"] for h in hooks if not {"pre-push", "commit-msg"} & set(h.get("stages", []))
    ]
    called = [m.strip() for ln in recipe("check") for m in re.findall(r"\$\(BIN\)/[^>&;|\\]+", ln)]
    lint = [c.replace(VENV_BIN, ".venv/bin/") for c in called if "pytest" not in c]
    assert on_commit == lint
    assert [h["entry"] for h in hooks if h.get("stages") == ["pre-push"]] == ["make check"]


def test_the_commit_msg_hook_refuses_a_subject_over_72_characters(tmp_path: Path) -> None:
    """CONTRIBUTING.md: one sentence of at most 72 characters, the detail in the body."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    (hook,) = [h for r in config["repos"] for h in r["hooks"] if h.get("stages") == ["commit-msg"]]
    said = {}
    for name, subject in (("short", "x" * 72), ("long", "x" * 73)):
        message = tmp_path / name
        message.write_text(f"{subject}\n\n{'a long body line ' * 20}\n")
        said[name] = subprocess.run(f"{hook['entry']} {message}", shell=True, cwd=ROOT).returncode
    assert said == {"short": 0, "long": 1}
