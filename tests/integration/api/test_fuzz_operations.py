"""POST operations with bodies aimed at the planner: a real fragment, PUs near the real ones,
every kind of granularity. Schemathesis mostly invents fragment names, which stop at
validation; these get through to planning and storing. Never a 5xx; a 2xx is a whole answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from tests.unit.api.fixtures import FRAGMENT, make_user, register_cluster, token_client

pytestmark = [pytest.mark.integration, pytest.mark.django_db, pytest.mark.timeout(600)]

pus = st.lists(st.integers(min_value=-1, max_value=6), max_size=5)
number = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3),
)
granularity = st.one_of(
    st.none(),
    st.sampled_from(["fluid", "batched", "all_at_once", "slow"]),
    st.dictionaries(
        st.sampled_from(
            [
                "vnodes_per_step",
                "max_keys_per_step",
                "max_bytes_per_step",
                "steps_in_flight",
                "bytes_per_second",
            ]
        ),
        number,
    ),
)
change = st.fixed_dictionaries(
    {}, optional={"added_parallel_units": pus, "removed_parallel_units": pus}
)
body = st.fixed_dictionaries(
    {"changes": st.dictionaries(st.sampled_from([FRAGMENT, "source"]), change, min_size=1)},
    optional={
        "strategy": st.sampled_from(["live", "stop_start", "fast"]),
        "granularity": granularity,
        "dry_run": st.booleans(),
        "weighted": st.one_of(st.booleans(), st.integers(0, 1)),
    },
)


@pytest.fixture
def operator_client(
    db: None, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> APIClient:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    settings.STATE_DIR = tmp_path / "state"
    register_cluster(epochs=2)
    return token_client(make_user("fuzzer", rescale=True))


@given(data=body)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_planner_bound_bodies_never_get_a_server_error(
    operator_client: APIClient, data: dict[str, Any]
) -> None:
    with transaction.atomic():  # each example on the same cluster, none sees another's operation
        response = operator_client.post("/api/v1/operations", data, format="json")
        transaction.set_rollback(True)
    assert response.status_code < 500, (data, response.content)
    answer = response.json()
    if response.status_code == 200:
        assert data.get("dry_run") is True and FRAGMENT in answer["fragments"]
    elif response.status_code == 202:
        assert answer["status"] == "pending" and FRAGMENT in answer["plan"]["fragments"]
        assert answer["steps_total"] == len(answer["steps"])
    else:
        assert response.status_code in (400, 409) and answer["code"] and answer["detail"]
