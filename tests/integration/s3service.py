"""A real S3 API on this machine for the object-store locations: moto's server (``moto_server``,
from ``moto[server]`` in requirements-dev.txt), started once per test process on a free port and
stopped at the end. Each test gets a bucket of its own.

The S3 URIs it gives are what a user would set (``RESCALER_DURABLE_LOCATION``), with the
endpoint in the query as ``pyarrow.fs`` reads it; the credentials moto accepts are in the
environment every child process (a runner, Spark's executors) inherits. The server is the
benchmarks' (``bench._cluster.MotoServer``), so that both start it one way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench._cluster import MotoServer

#: the tests' name for it: ``endpoint``, ``bucket()``, ``uri(bucket, prefix)``
S3Service = MotoServer


@pytest.fixture(scope="session")
def s3_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    """moto's S3 server for this test process (fails, saying what to install, without it)."""
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
