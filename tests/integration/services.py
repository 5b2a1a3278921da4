"""Throwaway Postgres and Redis servers for the fault tests, which restart them mid-operation.

The machine's own servers are never restarted by the suite (a developer's ``scripts/dev`` may be
using them): each fault test starts a private server of the same software on a free port, points
the stack at it and stops it after. Restarting one is a real restart of a real server: the
process ends (``kill -9`` for Redis, an immediate shutdown with crash recovery for Postgres), the
port answers nothing for a while, and a new process starts on the same port and data.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, up: bool, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                answered = True
        except OSError:
            answered = False
        if answered == up:
            return
        time.sleep(0.1)
    pytest.fail(f"{what} on port {port} did not {'come up' if up else 'go down'} in {timeout}s")


def _postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        pytest.fail(
            f"{name} (PostgreSQL's server programs) not found: apt-get install -y postgresql",
            pytrace=False,
        )
    return found[-1]


class PrivatePostgres:
    """A Postgres cluster of its own (initdb in a temporary directory, trust auth, loopback)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="rescaler-pg-"))
        self.data = self.dir / "data"
        # the server refuses to run as root: as root, run it as the postgres user
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *command: str) -> None:
        result = subprocess.run(
            [*self.as_user, *command], capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        if not self.data.exists():
            self._run(_postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                      "-A", "trust", "--no-sync")  # fmt: skip
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off"
        )
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.dir / "server.log"), "-w", "start")  # fmt: skip
        _wait_port(self.port, True, 30, "postgres")

    def create_database(self, name: str) -> None:
        self._run(_postgres_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                  "-U", "postgres", name)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down_s: float) -> None:
        """Crash it (immediate shutdown: no checkpoint, connections cut), keep it down for
        ``down_s`` seconds, start it again (WAL recovery) on the same port and data."""
        self.stop("immediate")
        _wait_port(self.port, False, 30, "postgres")
        time.sleep(down_s)
        self.start()

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """A redis-server of its own on a free port, keeping nothing on disk (as the machine's)."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.fail("redis-server not found: apt-get install -y redis-server", pytrace=False)
        out = open(self.log, "ab")  # noqa: SIM115 - the server owns it
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        _wait_port(self.port, True, 30, "redis")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def restart(self, down_s: float) -> None:
        """``kill -9`` it (every queued message, group and key is gone: it keeps nothing on
        disk), keep it down for ``down_s`` seconds, start an empty one on the same port."""
        self.kill()
        _wait_port(self.port, False, 30, "redis")
        time.sleep(down_s)
        self.start()
