"""Standalone Spark on this machine: :class:`LocalProvider` starts and stops ``spark-class``
worker processes against a standalone master, :class:`LocalMaster` runs that master
(``scripts/dev --workers N`` and the tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from workers.control import WorkerInfo
from workers.layout import LOCAL_DIR
from workers.provider.base import ProviderError
from workers.provider.processes import (
    alive,
    decommission,
    free_port,
    java_env,
    spark_home,
    stop_group,
    wait_for_port,
)


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


# a released machine's executors get this long to exit after its decommission, then it stops
RELEASE_DRAIN_S = 30.0


class LocalProvider:
    """Standalone Spark workers on this machine, each a ``spark-class`` process in its own
    session. Its registry (``<directory>/workers.json``) survives the process that started them,
    so the Celery worker that adds one and the one that releases it need not be the same."""

    name = "local"

    def __init__(
        self,
        master_url: str,
        directory: Path,
        memory: str = "1g",
        local_dir: Path | None = None,
        private_disks: bool = False,
    ) -> None:
        """``local_dir``: this host's disk for the executors' stores (:func:`local_store_dir`;
        default ``local`` in ``directory``). ``private_disks``: each worker has a disk of its
        own instead (``local`` in its work directory), as if each were a host of its own."""
        if not master_url.startswith("spark://"):
            raise ProviderError(
                f"the local provider needs a standalone master (SPARK_MASTER=spark://host:7077), "
                f"not {master_url!r}"
            )
        self.master_url = master_url
        self.dir = Path(directory)
        self.memory = memory
        # this host's disk for the executors' stores (RESCALER_LOCAL_DIR of every worker here)
        self.local_dir = Path(local_dir) if local_dir is not None else self.dir / "local"
        self.private_disks = private_disks

    # -- the registry ------------------------------------------------------------------------
    def _registry(self) -> Path:
        return self.dir / "workers.json"

    def workers(self) -> list[LocalWorker]:
        """The workers it started that are still running."""
        path = self._registry()
        if not path.exists():
            return []
        rows = [LocalWorker(**w) for w in json.loads(path.read_text("utf-8"))]
        return [w for w in rows if alive(w.pid)]

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
                env=java_env(
                    {
                        "SPARK_WORKER_DIR": str(work_dir),
                        # the directory its executors keep their PUs' stores in
                        # (workers/layout.py): this host's local disk, which outlives an
                        # executor on it; every worker here is on this one host
                        LOCAL_DIR: str(self.disk_of(work_dir)),
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
            stop_group(proc.pid)
            raise ProviderError(
                f"Spark worker {worker_id} did not start: {exc}; see {log_path}"
            ) from exc
        return worker

    def disk_of(self, work_dir: Path) -> Path:
        """The directory the executors of the worker in ``work_dir`` keep their stores in."""
        return Path(work_dir) / "local" if self.private_disks else self.local_dir

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
        stop_group(worker.pid, sig=sig)
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
        drained = decommission(w.pid, RELEASE_DRAIN_S)
        self.stop_worker(w)
        how = "after its executors exited" if drained else f"{RELEASE_DRAIN_S:.0f}s after notice"
        return f"stopped Spark worker {w.worker_id} (pid {w.pid}), decommissioned, {how}"

    def stop_all(self) -> None:
        for w in self.workers():
            stop_group(w.pid)
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
                env=java_env(),
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
            stop_group(self.proc.pid)
            self.proc = None


def local_store_dir(env: Mapping[str, str] | None = None, state_dir: Path | None = None) -> Path:
    """The directory this machine's standalone workers keep their executors' stores in:
    ``RESCALER_LOCAL_DIR``, else ``executors/local-workers`` beside ``state_dir`` (default
    ``STATE_DIR``): never inside the driver's state directory (docs/elastic-workers.md)."""
    env = os.environ if env is None else env
    if env.get(LOCAL_DIR):
        return Path(env[LOCAL_DIR])
    state = state_dir or Path(env.get("STATE_DIR") or Path.cwd() / "var" / "state")
    return Path(state).absolute().parent / "executors" / "local-workers"


def private_disks(env: Mapping[str, str] | None = None) -> bool:
    """Whether each of this machine's standalone workers has a disk of its own for its
    executors' stores (``RESCALER_LOCAL_DISKS=private``: as if each were a host, so that losing
    one loses its stores) or they share this host's (``shared``, the default)."""
    env = os.environ if env is None else env
    value = env.get("RESCALER_LOCAL_DISKS", "shared").strip().lower() or "shared"
    if value not in ("shared", "private"):
        raise ProviderError(f"RESCALER_LOCAL_DISKS must be shared or private, not {value!r}")
    return value == "private"


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
