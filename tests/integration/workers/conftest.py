"""Fixtures of the data plane's Spark tests."""

from collections.abc import Iterator

import pytest

from tests.integration.natsservice import nats_service, stream_names  # noqa: F401 - fixtures
from tests.integration.pgdatabase import sink_database  # noqa: F401 - a fixture
from tests.integration.s3service import s3_service  # noqa: F401 - a fixture
from tests.integration.workers.fixtures import kill_started_runners


@pytest.fixture(autouse=True)
def _no_runner_outlives_its_test() -> Iterator[None]:
    yield
    kill_started_runners()
