"""Flower's credentials on a fresh machine: made once into the state folder, printed once.

Flower is how a deployer watches the write jobs, and it never starts without basic auth
(`flowerconfig.py`): without `FLOWER_USER` / `FLOWER_PASSWORD` it stayed down, five failed
starts in a row. Set both to choose them. Without them, `memory-worker run` makes a pair the
first time, keeps it in the state folder (`flower.json`, readable by this user only) and prints
it that once; later runs read it from there. Flower binds loopback either way.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FILE = "flower.json"
USER = "memory-worker"
DEFAULT_PORT = 5555  # Flower's own default; FLOWER_PORT moves it (flowerconfig.py)


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str
    made_now: bool  # made by this call: the one time they are printed

    def as_env(self) -> dict[str, str]:
        return {"FLOWER_USER": self.user, "FLOWER_PASSWORD": self.password}


def credentials(state_dir: Path, env: Mapping[str, str]) -> Credentials | None:
    """None when the environment chooses them; else the state folder's pair, made if absent."""
    if env.get("FLOWER_USER") and env.get("FLOWER_PASSWORD"):
        return None
    path = state_dir / FILE
    if path.exists():
        kept = json.loads(path.read_text())
        return Credentials(str(kept["user"]), str(kept["password"]), made_now=False)
    made = Credentials(USER, secrets.token_urlsafe(18), made_now=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # this user's only
    with os.fdopen(fd, "w") as f:
        json.dump({"user": made.user, "password": made.password}, f)
    return made


def address(env: Mapping[str, str]) -> str:
    return f"http://127.0.0.1:{env.get('FLOWER_PORT') or DEFAULT_PORT}/"
