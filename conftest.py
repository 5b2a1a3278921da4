"""Fixtures shared by the whole suite.

The suite is integration-grade: it uses the real Postgres and Redis. When one is down, the tests
that need it FAIL with the service's name and the command that starts it; nothing is skipped
silently, so a green run always means the services were exercised.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from rescaler.preflight import postgres_problem, redis_problem


@pytest.fixture(scope="session")
def postgres_service() -> str:
    """The Postgres server the test database lives on; fails the test if it does not answer."""
    url = str(settings.DATABASE_URL)
    problem = postgres_problem(url)
    if problem:
        pytest.fail(problem, pytrace=False)
    return url


@pytest.fixture(scope="session")
def django_db_setup(postgres_service: str, django_db_setup: Any) -> Iterator[None]:
    """pytest-django's test database, created only after Postgres was found to answer."""
    yield


@pytest.fixture(scope="session")
def redis_service() -> str:
    """The Redis the tests use (database 1 by default); fails the test if it does not answer."""
    url = str(settings.REDIS_URL)
    problem = redis_problem(url)
    if problem:
        pytest.fail(problem, pytrace=False)
    return url
