"""What a worker provider is (:class:`WorkerProvider`), its error, and the two providers that
start no process here: :class:`NoProvider` and :class:`CommandProvider`."""

from __future__ import annotations

import shlex
import subprocess
from typing import Protocol

from workers.control import WorkerInfo


class ProviderError(Exception):
    """The provider cannot do what was asked; the message says why and what to do."""


class WorkerProvider(Protocol):
    name: str

    def add(self, cores: int = 1) -> str:
        """Ask for one more worker of ``cores`` cores; returns what was started (for the audit).
        The worker's executor joins the application by itself a few seconds later."""

    def release(self, worker: WorkerInfo) -> str:
        """Give back the machine of a worker whose executor was decommissioned."""


class NoProvider:
    name = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def add(self, cores: int = 1) -> str:
        raise ProviderError(self.reason)

    def release(self, worker: WorkerInfo) -> str:
        return f"nothing to release ({self.reason})"


class CommandProvider:
    """Runs an operator-supplied command; its stdout's last line is recorded in the audit."""

    name = "command"

    def __init__(self, command: str, timeout_s: float = 300.0) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ProviderError("RESCALER_WORKER_PROVIDER_COMMAND is empty")
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> str:
        try:
            done = subprocess.run(
                [*self.argv, *args],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProviderError(f"{shlex.join([*self.argv, *args])}: {exc}") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
            raise ProviderError(
                f"{shlex.join([*self.argv, *args])} exited {done.returncode}: {tail[0]}"
            )
        lines = done.stdout.strip().splitlines()
        return lines[-1] if lines else "ok"

    def add(self, cores: int = 1) -> str:
        return self._run("add", str(cores))

    def release(self, worker: WorkerInfo) -> str:
        return self._run("release", worker.name, worker.host)
