"""Worker providers: who starts a Spark worker when an operator asks for one, and stops it after
its drain (docs/elastic-workers.md).

* :class:`LocalProvider` starts ``spark-class org.apache.spark.deploy.worker.Worker`` processes on
  this machine against a standalone master (``SPARK_MASTER=spark://…``) and stops them;
* :class:`CommandProvider` runs ``RESCALER_WORKER_PROVIDER_COMMAND add`` / ``… release <worker>
  <host>``: the hook for an external manager (``docker compose up --scale spark-worker=N``, a
  Kubernetes scale, a cloud API);
* :class:`NoProvider` refuses, with the reason: local mode has one JVM and nothing to add.

``provider_from_env()`` picks one from ``RESCALER_WORKER_PROVIDER`` (``local``, ``command`` or
``none``; default ``local`` when ``SPARK_MASTER`` is a ``spark://`` URL, else ``none``).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import psutil

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


@dataclass(frozen=True)
class LocalWorker:
    """One ``spark-class`` worker process this provider started."""

    worker_id: int
    pid: int
    port: int
    webui_port: int
    cores: int
    work_dir: str
    log: str


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


def _java_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_HOME", str(spark_home()))
    # the executors' Python workers run this repository's code with this interpreter
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.update(extra or {})
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(pid: int, timeout_s: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Stop a process started with ``start_new_session`` and everything it forked."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# a released machine's executors get this long to exit after its decommission, then it stops
RELEASE_DRAIN_S = 30.0


def _executors_under(pid: int) -> list[psutil.Process]:
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


def _decommission(pid: int, timeout_s: float) -> bool:
    """SIGPWR to a standalone Spark worker (``spark.decommission.enabled``): its master stops
    giving it executors and its executors finish their tasks and exit. Returns whether none is
    left within ``timeout_s``."""
    try:
        os.kill(pid, signal.SIGPWR)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while _executors_under(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


class LocalProvider:
    """Standalone Spark workers on this machine, each a ``spark-class`` process in its own
    session. Its registry (``<directory>/workers.json``) survives the process that started them,
    so the Celery worker that adds one and the one that releases it need not be the same."""

    name = "local"

    def __init__(self, master_url: str, directory: Path, memory: str = "1g") -> None:
        if not master_url.startswith("spark://"):
            raise ProviderError(
                f"the local provider needs a standalone master (SPARK_MASTER=spark://host:7077), "
                f"not {master_url!r}"
            )
        self.master_url = master_url
        self.dir = Path(directory)
        self.memory = memory

    # -- the registry ------------------------------------------------------------------------
    def _registry(self) -> Path:
        return self.dir / "workers.json"

    def workers(self) -> list[LocalWorker]:
        """The workers it started that are still running."""
        path = self._registry()
        if not path.exists():
            return []
        rows = [LocalWorker(**w) for w in json.loads(path.read_text("utf-8"))]
        return [w for w in rows if _alive(w.pid)]

    def _save(self, workers: list[LocalWorker]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self._registry().with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(w) for w in workers], indent=1), "utf-8")
        os.replace(tmp, self._registry())

    # -- the provider ------------------------------------------------------------------------
    def start_worker(self, cores: int = 1, timeout_s: float = 60.0) -> LocalWorker:
        """Start one worker and wait until it listens (it registers with the master then)."""
        running = self.workers()
        worker_id = max((w.worker_id for w in running), default=0) + 1
        port, webui = free_port(), free_port()
        work_dir = self.dir / f"worker-{worker_id}"
        work_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.dir / f"worker-{worker_id}.log"
        argv = [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            "--cores",
            str(cores),
            "--memory",
            self.memory,
            "--port",
            str(port),
            "--webui-port",
            str(webui),
            "--work-dir",
            str(work_dir),
            self.master_url,
        ]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_java_env(
                    {
                        "SPARK_WORKER_DIR": str(work_dir),
                        # SIGPWR (a spot agent's, a node drain's) decommissions the worker and its
                        # executors gracefully: the driver sees it as a notice (docs/elastic-workers.md)
                        "SPARK_WORKER_OPTS": " ".join(
                            filter(
                                None,
                                (
                                    os.environ.get("SPARK_WORKER_OPTS", ""),
                                    "-Dspark.decommission.enabled=true",
                                ),
                            )
                        ),
                    }
                ),
                start_new_session=True,
            )
        worker = LocalWorker(worker_id, proc.pid, port, webui, cores, str(work_dir), str(log_path))
        self._save([*running, worker])
        try:
            wait_for_port(port, timeout_s, proc)
        except ProviderError as exc:
            _stop_group(proc.pid)
            raise ProviderError(
                f"Spark worker {worker_id} did not start: {exc}; see {log_path}"
            ) from exc
        return worker

    def add(self, cores: int = 1) -> str:
        w = self.start_worker(cores)
        return f"started Spark worker {w.worker_id} (pid {w.pid}, {w.cores} cores, port {w.port})"

    def executor_host(self, executor_id: str) -> LocalWorker | None:
        """The worker process that runs (or ran) ``executor_id`` of the newest application: an
        executor's working directory is ``<work dir>/<application>/<executor id>``, and a
        restarted runner is a new application whose executor ids start again at 0, so an id
        alone names one machine per application. Application ids (``app-<start time>-<n>``)
        sort by their start; the runner's is the newest on the machines of this provider."""
        workers = self.workers()
        apps = {p.name for w in workers for p in Path(w.work_dir).glob("app-*") if p.is_dir()}
        if not apps:
            return None
        current = max(apps)
        for w in workers:
            if (Path(w.work_dir) / current / executor_id).is_dir():
                return w
        return None

    def stop_worker(self, worker: LocalWorker, sig: int = signal.SIGTERM) -> None:
        _stop_group(worker.pid, sig=sig)
        self._save([w for w in self.workers() if w.worker_id != worker.worker_id])

    def release(self, worker: WorkerInfo) -> str:
        """Decommission the machine, then stop it. Stopped at once, its executor died first
        and the master, still seeing the machine alive, launched another one there for the
        application, which joined as a new worker and was lost when the machine went (in the
        soak). Decommissioned (SIGPWR, as a spot agent does), the master gives it no executor
        again; once its executors have exited it is stopped."""
        w = self.executor_host(worker.executor_id)
        if w is None:
            return f"no local Spark worker runs executor {worker.executor_id}; nothing to stop"
        drained = _decommission(w.pid, RELEASE_DRAIN_S)
        self.stop_worker(w)
        how = "after its executors exited" if drained else f"{RELEASE_DRAIN_S:.0f}s after notice"
        return f"stopped Spark worker {w.worker_id} (pid {w.pid}), decommissioned, {how}"

    def stop_all(self) -> None:
        for w in self.workers():
            _stop_group(w.pid)
        self._save([])


class LocalMaster:
    """A standalone master on this machine (``scripts/dev --workers N`` and the tests)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.dir = Path(directory)
        self.port = port or free_port()
        self.webui_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        log_path = self.dir / "master.log"
        argv = [
            str(spark_home() / "bin" / "spark-class"),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        ]
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_java_env(),
                start_new_session=True,
            )
        try:
            wait_for_port(self.port, timeout_s, self.proc)
        except ProviderError as exc:
            self.stop()
            raise ProviderError(f"the Spark master did not start: {exc}; see {log_path}") from exc
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            _stop_group(self.proc.pid)
            self.proc = None


def local_workers_dir(env: Mapping[str, str] | None = None, state_dir: Path | None = None) -> Path:
    """Where the local provider keeps its workers' registry and work directories (executors'
    logs, shipped files): ``RESCALER_LOCAL_WORKERS_DIR``, else ``_spark_workers`` in
    ``state_dir`` (default ``STATE_DIR``). Put it on another disk than the state where one fills
    up: executors that cannot write their logs fail to start, and Spark then ends the
    application."""
    env = os.environ if env is None else env
    if env.get("RESCALER_LOCAL_WORKERS_DIR"):
        return Path(env["RESCALER_LOCAL_WORKERS_DIR"])
    state = state_dir or Path(env.get("STATE_DIR") or Path.cwd() / "var" / "state")
    return state / "_spark_workers"


def provider_from_env(env: Mapping[str, str] | None = None) -> WorkerProvider:
    """The provider ``RESCALER_WORKER_PROVIDER`` names (see the module's docstring)."""
    env = os.environ if env is None else env
    master = env.get("SPARK_MASTER", "")
    kind = env.get("RESCALER_WORKER_PROVIDER") or (
        "local" if master.startswith("spark://") else "none"
    )
    if kind == "none":
        return NoProvider(
            "no worker provider: local mode runs in one JVM. Run a standalone master "
            "(scripts/dev --workers N) or set RESCALER_WORKER_PROVIDER=command"
        )
    if kind == "local":
        return LocalProvider(master, local_workers_dir(env))
    if kind == "command":
        command = env.get("RESCALER_WORKER_PROVIDER_COMMAND", "")
        if not command:
            raise ProviderError(
                "RESCALER_WORKER_PROVIDER=command needs RESCALER_WORKER_PROVIDER_COMMAND"
            )
        return CommandProvider(command)
    raise ProviderError(f"RESCALER_WORKER_PROVIDER must be local, command or none, not {kind!r}")
