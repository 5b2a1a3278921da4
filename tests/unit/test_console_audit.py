"""The console's Audit page: every audited event, filtered by the API's own FilterSet
(``AuditFilter``) by actor, kind, action, pipeline, operation and time, 50 to a page, with the
CSV of exactly the rows it lists. In a browser: tests/e2e/test_audit_page.py."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from typing import Any

import pytest
from django.test import Client

from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record
from rescaler.cluster.models import Worker
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import (
    PIPELINE,
    make_user,
    register_cluster,
    register_earlier_run,
    request_body,
)

pytestmark = pytest.mark.django_db

URL = "/audit/"


@pytest.fixture
def trail(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Events of every kind on two pipelines: wordcount's operation (requested by alice, as the
    service records it) and one of its steps, a worker of wordcount, wordcount itself, and an
    earlier run's pipeline."""
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    register_earlier_run("older", "tally")
    register_cluster()
    alice = make_user("alice", rescale=True)
    op = operation_request(user=alice, body=request_body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    (worker,) = Worker.objects.filter(pipeline__name=PIPELINE)
    return {
        "op": op,
        "requested": AuditEvent.objects.get(action="operation.requested"),
        "step": audit_record(
            actor_name="runner", action="step.collecting", obj=("step", f"{op.operation_id}/1")
        ),
        "worker": audit_record(
            actor=alice, action="worker.cordoned", obj=("worker", worker.name),
            before={"status": "active", "cores": 2}, after={"status": "cordoned", "cores": 2},
        ),
        "pipeline": audit_record(
            actor=alice, action="snapshot.requested", obj=("pipeline", PIPELINE)
        ),
        "older": audit_record(actor_name="bob", action="pipeline.archived", obj=("pipeline", "older")),
    }  # fmt: skip


@pytest.fixture
def signed_in(client: Client) -> Client:
    client.force_login(make_user("reader"))
    return client


def listed(response: Any) -> list[int]:
    """The event ids the page's table lists, in order."""
    assert response.status_code == 200, response.content[:2000]
    return [int(i) for i in re.findall(r'data-event="(\d+)"', response.content.decode())]


def test_visitors_are_sent_to_sign_in(client: Client) -> None:
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_every_event_newest_first_with_its_object_linked(
    signed_in: Client, trail: dict[str, Any]
) -> None:
    response = signed_in.get(URL)
    everything = list(AuditEvent.objects.order_by("-at", "-id").values_list("id", flat=True))
    assert listed(response) == everything and len(everything) >= 5
    page = response.content.decode()
    op = trail["op"].operation_id
    assert f'href="/operations/{op}/"><code>{op}/1</code>' in page  # a step opens its operation
    assert f'href="/snapshots/{PIPELINE}/"' in page
    # of a change of an object, only what changed: the whole is in the CSV and the API
    assert "<code>{&quot;status&quot;:&quot;active&quot;}</code>" in page
    assert "<code>{&quot;status&quot;:&quot;cordoned&quot;}</code>" in page
    assert "cores" not in page
    assert 'href="/audit/"' in page  # the navigation names the page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"actor": "alice"}, ["pipeline", "worker", "requested"]),
        ({"actor": "runner", "object_type": "step"}, ["step"]),
        ({"object_type": "worker"}, ["worker"]),
        ({"action_prefix": "operation."}, ["requested"]),
        ({"pipeline": PIPELINE}, ["pipeline", "worker", "step", "requested"]),
        ({"pipeline": "older"}, ["older"]),
        ({"operation": "OP"}, ["step", "requested"]),
        ({"pipeline": PIPELINE, "actor": "alice", "object_type": "pipeline"}, ["pipeline"]),
    ],
)
def test_the_filters_are_the_api_s(
    signed_in: Client, trail: dict[str, Any], query: dict[str, str], expected: list[str]
) -> None:
    query = {k: v.replace("OP", trail["op"].operation_id) for k, v in query.items()}
    ids = [trail[name].id for name in expected]
    assert listed(signed_in.get(URL, {**query, "object_id": ""})) == ids
    api = signed_in.get("/api/v1/audit", query)
    assert [e["id"] for e in api.json()["results"]] == ids


def test_the_time_range_takes_the_browser_s_local_times(
    signed_in: Client, trail: dict[str, Any]
) -> None:
    at = trail["worker"].at
    minute = at.replace(second=0, microsecond=0)
    local = lambda t: t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M")  # noqa: E731
    later = listed(signed_in.get(URL, {"at_after": local(minute + dt.timedelta(minutes=1))}))
    assert later == []
    before = listed(signed_in.get(URL, {"at_before": local(minute + dt.timedelta(minutes=1))}))
    assert trail["worker"].id in before


def test_a_refused_filter_is_said_and_lists_nothing(
    signed_in: Client, trail: dict[str, Any]
) -> None:
    response = signed_in.get(URL, {"object_type": "bogus", "at_after": "last tuesday"})
    assert listed(response) == []
    page = response.content.decode()
    assert 'role="alert"' in page and "object_type" in page and "at_after" in page


def test_the_csv_is_the_filtered_rows(signed_in: Client, trail: dict[str, Any]) -> None:
    page = signed_in.get(URL, {"actor": "alice", "object_type": "", "page": "1"}).content.decode()
    (href,) = re.findall(r'id="audit-csv" href="([^"]+)"', page)
    href = href.replace("&amp;", "&")
    assert href == "/api/v1/audit?format=csv&actor=alice"
    response = signed_in.get(href)
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [int(r["id"]) for r in rows] == [
        trail[n].id for n in ("pipeline", "worker", "requested")
    ]


def test_fifty_to_a_page_sorted_by_any_column(signed_in: Client, trail: dict[str, Any]) -> None:
    for i in range(60):
        audit_record(actor_name="runner", action="step.done", obj=("step", f"x/{i}"))
    first = listed(signed_in.get(URL))
    assert len(first) == 50
    second = listed(signed_in.get(URL, {"page": 2}))
    assert len(second) == AuditEvent.objects.count() - 50 and not set(first) & set(second)
    oldest = listed(signed_in.get(URL, {"sort": "at"}))
    assert oldest[0] == AuditEvent.objects.order_by("at", "id").first().id  # type: ignore[union-attr]
    by_actor = listed(signed_in.get(URL, {"sort": "actor_name"}))
    names = [AuditEvent.objects.get(id=i).actor_name for i in by_actor]
    assert names == sorted(names) and names[0] == "alice"


def test_the_operation_page_opens_its_events_on_the_audit_page(
    signed_in: Client, trail: dict[str, Any]
) -> None:
    op = trail["op"].operation_id
    page = signed_in.get(f"/operations/{op}/").content.decode()
    (href,) = re.findall(r'id="timeline-audit" href="([^"]+)"', page)
    assert href == f"/audit/?operation={op}"
    assert listed(signed_in.get(href)) == [trail["step"].id, trail["requested"].id]
