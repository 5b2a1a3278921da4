"""Fuzz the API from its own OpenAPI schema: whatever is sent, the answer is never a 5xx.

Schemathesis reads /api/schema/ through the WSGI app (in process, on the test database), then
for every operation sends up to ``MAX_EXAMPLES`` generated requests, valid and invalid (wrong
types, NUL characters, unknown fields, random paths), authenticated as an operator so the
mutating endpoints are reached past the permission check. The explicit examples of the schema
(a dry run and a real migration of word_count) run first, so the planning path is hit too.

Both generation modes run: *positive* data (what the schema allows: the bounds it publishes are
the parser's, so in-range absurdities reach the planner) and *negative* data (what it forbids:
out-of-range numbers and page sizes, wrong types, missing fields), never a 5xx. (Schemathesis's
``negative_data_rejection`` check is not run: an empty filter such as ``?created_before=`` is
"no filter", as the console's filter forms send it, where the schema's date-time says invalid.)
In CI (``CI`` set) hypothesis is derandomized (tests/conftest.py), so a run is repeatable; it
takes about half a minute.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.unit.api.fixtures import make_user, register_cluster

pytestmark = [pytest.mark.integration, pytest.mark.django_db, pytest.mark.timeout(600)]

MAX_EXAMPLES = int(os.environ.get("RESCALER_FUZZ_EXAMPLES", "25"))


@pytest.fixture
def _keep_test_connection() -> Iterator[None]:
    """Requests through the WSGI app close "old" connections at their start and end, which
    would close the test's connection (and its transaction); Django's test client prevents
    it the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def cluster(
    db: None,
    _keep_test_connection: None,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wordcount pipeline registered and alive; operations are queued, never driven; "add a
    worker" meets no provider (never a Spark worker started by the fuzzer)."""
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    monkeypatch.setenv("RESCALER_WORKER_PROVIDER", "none")
    settings.STATE_DIR = tmp_path / "state"
    register_cluster(epochs=2)


@pytest.fixture
def operator_token(db: None) -> str:
    user = make_user("fuzzer", rescale=True)
    return Token.objects.create(user=user).key


# Loaded at collection through the app itself: generating the schema needs no database.
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=MAX_EXAMPLES
)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(
    case: schemathesis.Case, cluster: None, operator_token: str
) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Token {operator_token}"}, checks=[not_a_server_error]
    )


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_answers_match_the_schema(
    case: schemathesis.Case, cluster: None, operator_token: str
) -> None:
    """The schema is accurate: documented statuses, content types and bodies, so clients
    generated from it (and schemathesis itself) can trust it."""
    case.call_and_validate(
        headers={"Authorization": f"Token {operator_token}"},
        checks=[
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
