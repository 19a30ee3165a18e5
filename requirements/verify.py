"""Fails when what is installed differs from a lock: `python requirements/verify.py LOCK...`.

`make install` runs it after installing, and tests/test_lock.py runs it on the test
environment, so a run can never pass on versions other than the locked ones. Lines whose
environment marker does not apply here (a Windows-only package) are skipped.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

try:
    from packaging.markers import Marker
except ImportError:  # a runtime-only install: pip carries its own copy
    from pip._vendor.packaging.markers import Marker

PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;([^\\]*))?")


def pins(lock: Path) -> dict[str, str]:
    """name → version for every line of `lock` that applies to this environment."""
    out: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        m = PINNED.match(line)
        if m is None:
            continue
        name, version, marker = m.group(1), m.group(2), m.group(3)
        if marker and not Marker(marker.strip()).evaluate():
            continue
        out[name] = version
    return out


def drift(lock: Path) -> list[str]:
    """One sentence per package whose installed version is not the locked one."""
    wrong = []
    for name, version in sorted(pins(lock).items()):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: locked {version}, not installed")
            continue
        if installed != version:
            wrong.append(f"{name}: locked {version}, installed {installed}")
    return wrong


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python requirements/verify.py LOCK [LOCK...]", file=sys.stderr)
        return 2
    wrong = [f"{lock}: {w}" for lock in argv for w in drift(Path(lock))]
    for w in wrong:
        print(w, file=sys.stderr)
    if wrong:
        print(
            "installed versions differ from the lock: run `make install` (or `make lock` "
            "to move the lock on purpose)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
