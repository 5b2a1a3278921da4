"""Fixtures of the source tests: the NATS server and streams deleted after each test."""

from tests.integration.natsservice import nats_service, stream_names  # noqa: F401 - fixtures
