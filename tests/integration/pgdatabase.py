"""A Postgres database of a test's own, for the sinks that create tables in it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, ""))


@pytest.fixture
def sink_database(postgres_service: str) -> Iterator[str]:
    """The URL of a database created for one test (``rescaler_sinks_test_<random>``), dropped
    after it: the sink creates tables, and the machine's databases are not the tests' to touch."""
    name = f"rescaler_sinks_test_{secrets.token_hex(4)}"
    admin = _with_database(postgres_service, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(postgres_service, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
