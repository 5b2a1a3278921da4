"""A cluster laid out as a real one, on this machine, for the benchmarks that need one: a Spark
standalone master, one-core ``spark-class`` workers each with a disk of its own (the local
provider's private disks), and an object store for the durable and recovery locations (moto's S3
server, ``moto[server]`` in requirements-dev.txt).

The tests' S3 fixture (``tests/integration/s3service.py``) starts moto the same way, through
``MotoServer``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: what moto accepts, and what each process that talks to it reads (AWS's usual variables)
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "rescaler-test",
    "AWS_SECRET_ACCESS_KEY": "rescaler-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class MotoServer:
    """moto's S3 server on a free port of 127.0.0.1: ``endpoint``, new buckets, URIs on them.
    ``start`` puts the credentials moto accepts into this process's environment (where they
    are unset), so that every child (a runner, Spark's executors) inherits them."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def start(self, timeout_s: float = 30.0) -> MotoServer:
        """Start it (``bench.moto_s3``: moto's server, answering as S3 does) and wait until it
        listens."""
        try:
            import moto.server  # noqa: F401
        except ImportError:
            raise RuntimeError(
                "moto's server is not installed: pip install -r requirements-dev.txt (moto[server])"
            ) from None
        for name, value in CREDENTIALS.items():
            os.environ.setdefault(name, value)
        port = free_port()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.moto_s3", "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )
        deadline = time.monotonic() + timeout_s
        while not _answers(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"moto_server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        self.endpoint = f"127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc = None

    def query(self) -> str:
        return f"endpoint_override={self.endpoint}&scheme=http&region=us-east-1"

    def bucket(self) -> str:
        """A new, empty bucket; its name."""
        import pyarrow.fs as pafs

        name = f"rescaler-test-{secrets.token_hex(4)}"
        fs = pafs.S3FileSystem(
            endpoint_override=self.endpoint,
            scheme="http",
            region="us-east-1",
            access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            allow_bucket_creation=True,
        )
        fs.create_dir(name)
        return name

    def uri(self, bucket: str, prefix: str = "") -> str:
        path = f"{bucket}/{prefix}".rstrip("/")
        return f"s3://{path}?{self.query()}"


@dataclass
class Cluster:
    """A running standalone cluster: its master's URL, the provider of its workers, and, when
    it has an object store, the URIs of the durable and recovery locations in it."""

    master_url: str
    provider: Any  # workers.provider.LocalProvider
    durable_location: str = ""
    recovery_dir: str = ""

    def lose_host(self, worker_id: int) -> str:
        """A host lost: kill -9 of its Spark worker and its executors, its disk deleted."""
        w = next(w for w in self.provider.workers() if w.worker_id == worker_id)
        os.killpg(w.pid, signal.SIGKILL)
        disk = self.provider.disk_of(Path(w.work_dir))
        if self.provider.private_disks:
            shutil.rmtree(disk, ignore_errors=True)
        return f"Spark worker {w.worker_id} (pid {w.pid}), disk {disk}"

    def disks(self) -> list[Path]:
        return [self.provider.disk_of(Path(w.work_dir)) for w in self.provider.workers()]


@contextmanager
def standalone(
    workdir: Path,
    *,
    workers: int = 2,
    cores: int = 1,
    memory: str = "2g",
    private_disks: bool = True,
    object_store: bool = True,
) -> Iterator[Cluster]:
    """A master and ``workers`` workers of ``cores`` cores; each with a disk of its own when
    ``private_disks`` (else one disk for the host, as executors on one machine share it); the
    durable and recovery locations in moto's S3 when ``object_store``."""
    from workers.provider import LocalMaster, LocalProvider

    master = LocalMaster(workdir / "spark")
    moto = MotoServer(workdir / "moto.log")
    master.start()
    provider = LocalProvider(
        master.url, workdir / "spark" / "workers", memory=memory, private_disks=private_disks
    )
    try:
        cluster = Cluster(master.url, provider)
        if object_store:
            # first: it puts the credentials into the environment the workers, and so their
            # executors, inherit (started without them, an executor's uploads go unsigned,
            # and moto keeps such a body with its chunk framing: every read-back differs)
            moto.start()
            bucket = moto.bucket()
            cluster.durable_location = moto.uri(bucket, "durable")
            cluster.recovery_dir = moto.uri(bucket, "recovery")
        for _ in range(workers):
            provider.start_worker(cores)
        yield cluster
    finally:
        provider.stop_all()
        master.stop()
        moto.stop()
