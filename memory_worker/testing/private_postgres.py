"""A PostgreSQL server of one's own, to stop and start: the store's restart, for real.

The tests and the fault benchmark stop a database under running workers (a deployer's
maintenance, a crash). They never touch a server someone else runs: this one lives in a
temporary folder (`initdb`), listens on loopback at a port of its own, trusts local
connections, and is removed when done. Stopped the abrupt way (`pg_ctl stop -m immediate`: the
server is gone mid-transaction, as when it crashes); started again, it recovers and answers
"the database system is starting up" for a moment, then serves.

PostgreSQL refuses to run as root: under root the server runs as the `postgres` user when the
host has one. `available()` says whether this host can run one at all.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "postgres"
# No fsync: only a crash of the machine loses what a test wrote, never the server's stop.
# (synchronous_commit stays on: an immediate stop would lose the last commits.)
FAST = "-c fsync=off -c full_page_writes=off"


def _run_as() -> list[str]:
    """The prefix that runs a server command as a user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", SUPERUSER, "--"]


def available() -> bool:
    """Whether `initdb` and `pg_ctl` are on PATH and a user may run them here."""
    if not (shutil.which("initdb") and shutil.which("pg_ctl")):
        return False
    if os.geteuid() != 0:
        return True
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        return False
    return shutil.which("runuser") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """One private server: `start()`, `stop()` (abrupt), `start()` again, `remove()`."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mw-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._made = False
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SUPERUSER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            [*_run_as(), *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def start(self) -> PrivatePostgres:
        """Start the server (made on the first start), and wait until it accepts connections."""
        if not self._made:
            self._ctl("initdb", "-D", str(self.data), "-A", "trust", "-U", SUPERUSER, "-N")
            self._made = True
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 {FAST}"
        log = str(self.root / "server.log")
        self._ctl("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")
        return self

    def stop(self) -> None:
        """Stop at once, mid-transaction if need be: every client's connection is cut and new
        ones are refused until `start()`."""
        self._ctl("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        done = subprocess.run(
            [*_run_as(), "pg_ctl", "-D", str(self.data), "status"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self._made and done.returncode == 0

    def remove(self) -> None:
        """Stop the server if it runs and delete its folder."""
        if self._made and self.running():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
