"""Who may do what: every endpoint × anonymous, a viewer (logged in), an operator (permission).

Reads need a login (401 without); starting or cancelling a rescale needs operations.rescale
(403 without, 401 anonymous). A refused mutation changes nothing and records nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import make_user, request_body, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def pending(cluster: Pipeline) -> RescaleOperation:
    op = operation_request(
        user=make_user("someone", rescale=True), body=request_body(added_parallel_units=[2])
    )
    assert isinstance(op, RescaleOperation)
    return op


Call = Callable[[APIClient, RescaleOperation], Any]

MUTATIONS: dict[str, tuple[Call, int]] = {
    "POST operations": (
        lambda c, op: c.post(
            "/api/v1/operations", request_body(added_parallel_units=[3]), format="json"
        ),
        409,  # the operator reaches validation: word_count is busy with `pending`
    ),
    "POST operations (dry run)": (
        lambda c, op: c.post(
            "/api/v1/operations",
            {"changes": {"word_count": {"added_parallel_units": [3]}}, "dry_run": True},
            format="json",
        ),
        409,
    ),
    "POST operations/{operation_id}/cancel": (
        lambda c, op: c.post(f"/api/v1/operations/{op.operation_id}/cancel"),
        202,
    ),
    "POST workers/{name}/cordon": (lambda c, op: c.post("/api/v1/workers/local-0/cordon"), 200),
    "POST workers/{name}/uncordon": (lambda c, op: c.post("/api/v1/workers/local-0/uncordon"), 200),
    # the operator reaches the service: word_count runs only on local-0's PUs
    "POST workers/{name}/drain": (lambda c, op: c.post("/api/v1/workers/local-0/drain"), 409),
    # cordoned at once; its drain is refused for the same reason, which the answer says
    "POST workers/{name}/notice": (lambda c, op: c.post("/api/v1/workers/local-0/notice"), 202),
    # the operator reaches the provider: there is none in the tests' environment
    "POST workers": (lambda c, op: c.post("/api/v1/workers", {"cores": 1}, format="json"), 409),
    # the operator reaches the service: mode off, nothing is short of PUs
    "POST pipelines/{name}/recommendation/workers": (
        lambda c, op: c.post("/api/v1/pipelines/wordcount/recommendation/workers"),
        409,
    ),
}
# PUT pipelines/{name}/autoscaling is an admin's, not an operator's: below, and in
# tests/unit/test_roles.py

READS: dict[str, Call] = {
    "GET cluster": lambda c, op: c.get("/api/v1/cluster"),
    "GET operations": lambda c, op: c.get("/api/v1/operations"),
    "GET operations/{operation_id}": lambda c, op: c.get(f"/api/v1/operations/{op.operation_id}"),
    "GET fragments/{name}/keys/{key}": lambda c, op: c.get("/api/v1/fragments/word_count/keys/a"),
    "GET audit": lambda c, op: c.get("/api/v1/audit"),
    "GET workers": lambda c, op: c.get("/api/v1/workers"),
    "GET audit (csv)": lambda c, op: c.get("/api/v1/audit", {"format": "csv"}),
    "GET api root": lambda c, op: c.get("/api/v1/"),
    "GET pipelines/{name}/autoscaling": lambda c, op: c.get(
        "/api/v1/pipelines/wordcount/autoscaling"
    ),
    "GET pipelines/{name}/recommendation": lambda c, op: c.get(
        "/api/v1/pipelines/wordcount/recommendation"
    ),
    "GET pipelines/{name}/autoscaling/decisions": lambda c, op: c.get(
        "/api/v1/pipelines/wordcount/autoscaling/decisions"
    ),
}


def _client(who: str) -> APIClient:
    if who == "anonymous":
        return token_client(None)
    return token_client(make_user(who, rescale=who == "operator"))


@pytest.mark.parametrize("endpoint", sorted(MUTATIONS))
@pytest.mark.parametrize(
    ("who", "expected"), [("anonymous", 401), ("viewer", 403), ("operator", None)]
)
def test_mutations(
    pending: RescaleOperation, endpoint: str, who: str, expected: int | None
) -> None:
    call, allowed = MUTATIONS[endpoint]
    events = AuditEvent.objects.count()
    response = call(_client(who), pending)
    assert response.status_code == (expected or allowed), response.content
    if expected is not None:
        error = response.json()
        assert error["code"] == ("not_authenticated" if who == "anonymous" else "permission_denied")
        assert "operations.rescale" in error["detail"] or who == "anonymous"
        assert AuditEvent.objects.count() == events, "a refused mutation records nothing"
        pending.refresh_from_db()
        assert pending.status == "pending"
        assert RescaleOperation.objects.count() == 1


@pytest.mark.parametrize(
    ("who", "expected"),
    [("anonymous", 401), ("viewer", 403), ("operator", 403), ("admin", 200)],
)
def test_a_policy_is_set_by_an_admin_only(cluster: Pipeline, who: str, expected: int) -> None:
    """In auto mode a policy starts rescales by itself: ``autoscaling.change_autoscalingpolicy``,
    the admin role's, not ``operations.rescale``."""
    if who == "anonymous":
        client = token_client(None)
    else:
        client = token_client(make_user(who, rescale=who != "viewer", policy=who == "admin"))
    url = "/api/v1/pipelines/wordcount/autoscaling"
    events = AuditEvent.objects.count()
    response = client.put(url, {"mode": "recommend"}, format="json")
    assert response.status_code == expected, response.content
    if expected == 403:
        assert "autoscaling.change_autoscalingpolicy" in response.json()["detail"]
        assert AuditEvent.objects.count() == events, "a refused change records nothing"


@pytest.mark.parametrize("endpoint", sorted(READS))
@pytest.mark.parametrize(("who", "expected"), [("anonymous", 401), ("viewer", 200)])
def test_reads(pending: RescaleOperation, endpoint: str, who: str, expected: int) -> None:
    response = READS[endpoint](_client(who), pending)
    assert response.status_code == expected, response.content
    if expected == 401:
        assert response["Content-Type"].startswith("application/json")
        assert response.json()["code"] == "not_authenticated"


def test_a_superuser_may_rescale(cluster: Pipeline) -> None:
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("root", password="x")
    response = token_client(admin).post(
        "/api/v1/operations", request_body(added_parallel_units=[2]), format="json"
    )
    assert response.status_code == 202
    assert AuditEvent.objects.get(action="operation.requested").actor_name == "root"


def test_the_permission_can_come_from_a_group(cluster: Pipeline) -> None:
    from django.contrib.auth.models import Group, Permission

    group = Group.objects.create(name="operators")
    group.permissions.add(Permission.objects.get(codename="rescale"))
    user = make_user("grouped")
    user.groups.add(group)
    response = token_client(user).post(
        "/api/v1/operations", request_body(added_parallel_units=[2]), format="json"
    )
    assert response.status_code == 202


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/",
        "/api/v1/cluster",
        "/api/v1/operations",
        "/api/v1/operations/{operation_id}",
        "/api/v1/fragments/word_count/keys/apple",
        "/api/v1/audit",
        "/api/v1/workers",
    ],
)
def test_the_browsable_api_renders_for_a_logged_in_operator(
    pending: RescaleOperation, path: str
) -> None:
    client = APIClient()
    client.force_login(make_user("browser", rescale=True))
    response = client.get(path.format(operation_id=pending.operation_id), HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")


def test_schema_and_its_ui_are_served(db: None) -> None:
    client = APIClient()
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert set(paths) == {
        "/api/v1/cluster", "/api/v1/operations", "/api/v1/operations/{operation_id}",
        "/api/v1/operations/{operation_id}/cancel", "/api/v1/fragments/{fragment}/keys/{key}",
        "/api/v1/audit", "/api/v1/workers", "/api/v1/workers/{name}/cordon",
        "/api/v1/workers/{name}/uncordon", "/api/v1/workers/{name}/drain",
        "/api/v1/workers/{name}/notice", "/api/v1/pipelines/{name}/snapshots",
        "/api/v1/pipelines/{name}/autoscaling", "/api/v1/pipelines/{name}/recommendation",
        "/api/v1/pipelines/{name}/autoscaling/decisions",
        "/api/v1/pipelines/{name}/recommendation/workers",
    }  # fmt: skip
    assert "Error" in schema.json()["components"]["schemas"]
    for ui in ("/api/docs/", "/api/redoc/"):
        assert client.get(ui).status_code == 200


def test_the_permission_class_is_named_after_the_permission_it_checks() -> None:
    """``operations.rescale`` is checked by ``CanRescale``: the old name ("reschedule") is left
    nowhere in the code (only in the migration that renamed the permission)."""
    from pathlib import Path

    from dashboard.api import permissions, snapshots
    from dashboard.api.views import operations

    assert permissions.RESCALE_PERMISSION == "operations.rescale"
    assert issubclass(snapshots.CanSnapshot, permissions.CanRescale)
    assert operations.OperationListView.permission_classes[-1] is permissions.CanRescale
    root = Path(__file__).resolve().parents[3]
    old = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("rescaler", "dashboard", "workers", "static", "templates")
        for path in sorted((root / folder).rglob("*"))
        if path.suffix in {".py", ".js", ".html"} and "migrations" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "reschedul" in line.lower()
    ]
    assert old == []
