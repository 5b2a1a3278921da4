"""The processes of a local standalone cluster, as the local provider and master handle them:
Spark's own launcher (``spark-class``) and its environment, ports, and stopping or
decommissioning a process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from workers.provider.base import ProviderError


def spark_home() -> Path:
    """The pip package's Spark (``bin/spark-class`` is shipped, ``sbin/`` is not)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ProviderError(f"the process exited ({proc.returncode}) before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise ProviderError(f"nothing listens on port {port} after {timeout_s:.0f}s")


def java_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_HOME", str(spark_home()))
    # the executors' Python workers run this repository's code with this interpreter
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.update(extra or {})
    return env


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pid: int, timeout_s: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Stop a process started with ``start_new_session`` and everything it forked."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    if alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def executors_under(pid: int) -> list[psutil.Process]:
    """The executor processes a Spark worker (``pid``) runs."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if any("CoarseGrainedExecutorBackend" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def decommission(pid: int, timeout_s: float) -> bool:
    """SIGPWR to a standalone Spark worker (``spark.decommission.enabled``): its master stops
    giving it executors and its executors finish their tasks and exit. Returns whether none is
    left within ``timeout_s``."""
    try:
        os.kill(pid, signal.SIGPWR)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while executors_under(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
