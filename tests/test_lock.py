"""The environment the tests run in is the locked one, and the check that says so can fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERIFY = ROOT / "requirements" / "verify.py"


def verify(*locks: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(VERIFY), *map(str, locks)], capture_output=True, text=True
    )


def test_the_installed_versions_are_exactly_the_test_lock() -> None:
    done = verify(ROOT / "requirements" / "test.txt")
    assert done.returncode == 0, done.stderr


def test_a_package_at_another_version_than_its_lock_fails_the_check_by_name(
    tmp_path: Path,
) -> None:
    lock = (ROOT / "requirements" / "test.txt").read_text()
    assert "\nredis==" in lock
    drifted = tmp_path / "drifted.txt"
    drifted.write_text(lock.replace("\nredis==", "\nredis==0.0.1+drift\n#", 1))
    done = verify(drifted)
    assert done.returncode == 1
    assert "redis: locked 0.0.1+drift, installed" in done.stderr


def test_a_locked_package_that_is_not_installed_fails_the_check(tmp_path: Path) -> None:
    lock = tmp_path / "extra.txt"
    lock.write_text("no-such-package-here==1.0 \\\n    --hash=sha256:00\n")
    done = verify(lock)
    assert done.returncode == 1
    assert "no-such-package-here: locked 1.0, not installed" in done.stderr


def test_a_line_for_another_platform_is_not_required_here(tmp_path: Path) -> None:
    lock = tmp_path / "windows.txt"
    lock.write_text("no-such-package-here==1.0 ; sys_platform == 'nonexistent-os'\n")
    assert verify(lock).returncode == 0


def test_every_lock_agrees_on_the_version_of_each_package_they_share() -> None:
    sys.path.insert(0, str(VERIFY.parent))
    try:
        from verify import pins  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    seen: dict[str, tuple[str, str]] = {}
    for lock in sorted((ROOT / "requirements").glob("*.txt")):
        for name, version in pins(lock).items():
            first = seen.setdefault(name, (version, lock.name))
            assert first[0] == version, f"{name}: {first[1]} has {first[0]}, {lock.name} {version}"
