"""A real S3 API on this machine for the object-store locations: moto's server (``moto_server``,
from ``moto[server]`` in requirements-dev.txt), started once per test process on a free port and
stopped at the end. Each test gets a bucket of its own.

The S3 URIs it gives are what a user would set (``RESCALER_DURABLE_LOCATION``), with the
endpoint in the query as ``pyarrow.fs`` reads it; the credentials moto accepts are in the
environment every child process (a runner, Spark's executors) inherits.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: what moto accepts, and what each process that talks to it reads (AWS's usual variables)
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "rescaler-test",
    "AWS_SECRET_ACCESS_KEY": "rescaler-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
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


class S3Service:
    """One moto server: ``endpoint`` (host:port) and bucket URIs on it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

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


@pytest.fixture(scope="session")
def s3_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    """moto's S3 server for this test process (fails, saying what to install, without it)."""
    binary = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(binary).exists():
        pytest.fail(
            "moto_server is not installed: pip install -r requirements-dev.txt (moto[server])",
            pytrace=False,
        )
    for name, value in CREDENTIALS.items():
        os.environ.setdefault(name, value)
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while not _answers(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"moto_server did not start: {log.read_text()[-2000:]}", pytrace=False)
        time.sleep(0.1)
    try:
        yield S3Service(f"127.0.0.1:{port}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
