"""GET /api/v1/audit: the audit log with filters, as JSON pages and as CSV."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record

pytestmark = pytest.mark.django_db

URL = "/api/v1/audit"


@pytest.fixture
def events(operator: Any) -> list[AuditEvent]:
    return [
        audit_record(actor=operator, action="operation.requested",
                     obj=("operation", "op1"), after={"steps": 2}),
        audit_record(actor_name="runner", action="step.collecting",
                     obj=("step", "op1/1"), before={"phase": "planned"},
                     after={"phase": "collecting"}),
        audit_record(actor_name="orchestrator", action="operation.completed",
                     obj=("operation", "op1")),
        audit_record(actor_name="=cmd|' /C calc'!A0", action="operation.requested",
                     obj=("operation", "op2")),
    ]  # fmt: skip


def ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [e["id"] for e in response.json()["results"]]


def test_newest_first_with_actor_and_before_after(
    viewer_client: APIClient, events: list[AuditEvent]
) -> None:
    data = viewer_client.get(URL).json()
    assert data["count"] == 4
    assert [e["id"] for e in data["results"]] == [e.id for e in reversed(events)]
    step = next(e for e in data["results"] if e["action"] == "step.collecting")
    assert step["actor_name"] == "runner" and step["before"] == {"phase": "planned"}
    assert step["object_type"] == "step" and step["object_id"] == "op1/1"


def test_filters(viewer_client: APIClient, events: list[AuditEvent]) -> None:
    requested, step, completed, _ = events
    assert ids(viewer_client.get(URL, {"actor": "operator"})) == [requested.id]
    assert ids(viewer_client.get(URL, {"action": "step.collecting"})) == [step.id]
    assert ids(viewer_client.get(URL, {"action_prefix": "operation.", "object_id": "op1"})) == [
        completed.id,
        requested.id,
    ]
    assert ids(viewer_client.get(URL, {"object_type": "step"})) == [step.id]
    # an operation's id brings its steps' events along
    assert ids(viewer_client.get(URL, {"object_id": "op1"})) == [
        completed.id,
        step.id,
        requested.id,
    ]
    later = (requested.at + dt.timedelta(hours=1)).isoformat()
    assert ids(viewer_client.get(URL, {"at_after": later})) == []
    assert len(ids(viewer_client.get(URL, {"at_before": later}))) == 4


def test_invalid_time_is_refused(viewer_client: APIClient, events: list[AuditEvent]) -> None:
    response = viewer_client.get(URL, {"at_after": "last tuesday"})
    assert response.status_code == 400
    assert (
        response.json()["code"] == "invalid_parameters" and "at_after" in response.json()["errors"]
    )


def _csv(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="audit.csv"' in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_every_matching_event_unpaginated(
    viewer_client: APIClient, events: list[AuditEvent]
) -> None:
    for i in range(60):  # more than a JSON page
        audit_record(actor_name="runner", action="step.done",
                     obj=("step", f"op3/{i}"))  # fmt: skip
    rows = _csv(viewer_client.get(URL, {"format": "csv"}))
    assert len(rows) == 64
    assert list(rows[0]) == [
        "id", "at", "actor_name", "action", "object_type", "object_id", "before", "after"
    ]  # fmt: skip
    step = next(r for r in rows if r["action"] == "step.collecting")
    assert json.loads(step["before"]) == {"phase": "planned"}
    assert dt.datetime.fromisoformat(step["at"]) == events[1].at
    filtered = _csv(viewer_client.get(URL, {"format": "csv", "actor": "operator"}))
    assert [r["action"] for r in filtered] == ["operation.requested"]


def test_csv_by_accept_header(viewer_client: APIClient, events: list[AuditEvent]) -> None:
    rows = _csv(viewer_client.get(URL, HTTP_ACCEPT="text/csv"))
    assert len(rows) == 4


def test_csv_cells_that_a_spreadsheet_would_run_are_text(
    viewer_client: APIClient, events: list[AuditEvent]
) -> None:
    rows = _csv(viewer_client.get(URL, {"format": "csv", "object_id": "op2"}))
    assert rows[0]["actor_name"] == "'=cmd|' /C calc'!A0"


def test_csv_refusals_are_json(viewer_client: APIClient, anon: APIClient) -> None:
    response = anon.get(URL, {"format": "csv"})
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    response = viewer_client.get(URL, {"format": "csv", "at_after": "never"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_parameters"


def test_the_audit_log_has_no_write_endpoint(
    viewer_client: APIClient, operator_client: APIClient, events: list[AuditEvent]
) -> None:
    for client in (viewer_client, operator_client):
        response = client.post(URL, {}, format="json")
        assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"
        assert client.delete(URL).status_code == 405


def test_an_unknown_kind_is_refused(viewer_client: APIClient, events: list[AuditEvent]) -> None:
    response = viewer_client.get(URL, {"object_type": "rescale_operation"})
    assert response.status_code == 400 and "object_type" in response.json()["errors"]
