"""Fixtures of the sink tests: a Postgres database of their own, the NATS server, temp dirs."""

from tests.integration.natsservice import nats_service, stream_names  # noqa: F401 - fixtures
from tests.integration.pgdatabase import sink_database  # noqa: F401 - a fixture
