"""The cluster page's autoscaling panel: the recommendation with its reasons and the figures it
rests on, "Apply" starting exactly its bound plan, and the policy form with its refusals on
its fields. The services are the API's (tests/unit/api/test_autoscaling.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.models import AutoscalingPolicy
from rescaler.autoscaling.services import autoscaling_policy_update
from rescaler.operations.models import OperationPlan, RescaleOperation
from tests.unit.api.fixtures import PIPELINE, make_user, move_the_mapping, register_cluster
from tests.unit.rescaler.autoscaling.fixtures import report_epochs
from tests.unit.rescaler.autoscaling.test_provisioning import FakeProvider, short_of_one_pu

pytestmark = pytest.mark.django_db

POLICY_FORM = {
    "mode": "recommend",
    "target_utilisation": "0.7",
    "min_parallel_units": "1",
    "max_parallel_units": "8",
    "max_step": "4",
    "stabilisation_s": "60",
    "cooldown_s": "60",
    "catch_up_s": "120",
    "scale_in_blackout_hours": "8, 9",
}


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)


@pytest.fixture
def admin(client: Client) -> Any:
    user = make_user("admin", rescale=True, policy=True)
    client.force_login(user)
    return user


def _panel(page: str) -> str:
    found = re.search(
        rf'<section class="card autoscaling" id="autoscaling-{PIPELINE}".*?</section>', page, re.S
    )
    assert found, "no autoscaling panel"
    return found.group(0)


def _stepped(user: Any) -> None:
    """Signals that call for word_count on 3 PUs (tests/unit/api/test_autoscaling.py)."""
    register_cluster(epochs=0)
    report_epochs(count=60, records=lambda e, pu: 900 if e >= 5 else 300, busy_s_per_record=0.002)
    autoscaling_policy_update(
        user=user,
        pipeline=PIPELINE,
        changes={"mode": "recommend", "stabilisation_s": 60, "cooldown_s": 60},
    )


def test_the_panel_says_off_and_offers_the_policy_form(client: Client, admin: Any) -> None:
    register_cluster()
    panel = _panel(client.get("/").content.decode())
    assert 'data-kind="no_change"' in panel
    assert "autoscaling is off" in panel
    assert 'action="/pipelines/wordcount/autoscaling"' in panel
    assert 'name="target_utilisation"' in panel and 'value="0.7"' in panel
    assert "autoscaling-apply" not in panel and "plan_id" not in panel
    assert 'href="/operations/#decisions"' in panel  # the history of its decisions


@pytest.mark.parametrize("rescale", [False, True], ids=["viewer", "operator"])
def test_a_viewer_or_an_operator_sees_the_policy_but_no_form(client: Client, rescale: bool) -> None:
    """Setting a policy is an admin's: in auto mode it starts rescales by itself."""
    register_cluster()
    client.force_login(make_user("someone", rescale=rescale))
    panel = _panel(client.get("/").content.decode())
    assert '<form class="policy"' not in panel
    assert "an admin's" in panel
    response = client.post("/pipelines/wordcount/autoscaling", POLICY_FORM)
    assert response.status_code == 403
    assert not AutoscalingPolicy.objects.exists()


def test_the_policy_form_saves_the_policy(client: Client, admin: Any) -> None:
    register_cluster()
    response = client.post("/pipelines/wordcount/autoscaling", POLICY_FORM)
    assert response.status_code == 302
    assert response["Location"].endswith(f"/#autoscaling-{PIPELINE}")
    row = AutoscalingPolicy.objects.get()
    assert (row.mode, row.max_parallel_units, row.scale_in_blackout_hours) == (
        "recommend",
        8,
        [8, 9],
    )
    assert AuditEvent.objects.get(action="autoscaling.policy_updated").actor == admin
    panel = _panel(client.get("/").content.decode())
    assert 'value="8, 9"' in panel


@pytest.mark.parametrize(
    ("changed", "field", "says"),
    [
        ({"min_parallel_units": "9"}, "min_parallel_units", "above max_parallel_units 8"),
        ({"target_utilisation": "1.5"}, "target_utilisation", "must be in (0, 1]"),
        ({"scale_in_blackout_hours": "8, late"}, "scale_in_blackout_hours", "whole hours"),
        ({"scale_in_blackout_hours": "25"}, "scale_in_blackout_hours", "hours are 0 to 23"),
    ],
)
def test_a_refused_policy_is_shown_on_its_field(
    client: Client, admin: Any, changed: dict[str, str], field: str, says: str
) -> None:
    register_cluster()
    response = client.post("/pipelines/wordcount/autoscaling", {**POLICY_FORM, **changed})
    assert response.status_code == 400
    panel = _panel(response.content.decode())
    block = re.search(rf'<div class="field invalid" data-field="{field}">.*?</div>', panel, re.S)
    assert block and says in block.group(0)
    assert not AuditEvent.objects.filter(action="autoscaling.policy_updated").exists()


def test_apply_starts_exactly_the_plan_shown(client: Client, admin: Any) -> None:
    _stepped(admin)
    panel = _panel(client.get("/").content.decode())
    assert 'data-kind="scale"' in panel
    assert re.search(
        r'data-fragment="word_count">.*?<td>2</td>\s*<td class="after">3</td>', panel, re.S
    )
    assert "<td>900/s</td>" in panel and "<td>500</td>" in panel  # rates, rounded
    assert "busy_s" not in panel  # reported here: not among the missing signals
    assert "<code>backlog</code>" in panel
    plan_id = re.search(r'name="plan_id" value="([0-9a-f]{32})"', panel).group(1)  # type: ignore[union-attr]
    assert "0, 1 → 0, 1, 2" in panel
    response = client.post("/pipelines/wordcount/autoscaling/apply", {"plan_id": plan_id})
    op = RescaleOperation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/operations/{op.operation_id}/"
    assert AuditEvent.objects.get(action="operation.requested").after["plan_id"] == plan_id
    assert OperationPlan.objects.get(plan_id=plan_id).operation == op
    # while it runs the panel proposes nothing
    panel = _panel(client.get("/").content.decode())
    assert 'data-kind="no_change"' in panel and "is in progress" in panel


def test_apply_of_a_stale_plan_is_refused_with_its_reason(client: Client, admin: Any) -> None:
    _stepped(admin)
    panel = _panel(client.get("/").content.decode())
    plan_id = re.search(r'name="plan_id" value="([0-9a-f]{32})"', panel).group(1)  # type: ignore[union-attr]
    move_the_mapping()
    response = client.post(
        "/pipelines/wordcount/autoscaling/apply", {"plan_id": plan_id}, follow=True
    )
    assert "plan_stale" in response.content.decode()
    assert not RescaleOperation.objects.exists()
    bad = client.post("/pipelines/wordcount/autoscaling/apply", {"plan_id": "x"}, follow=True)
    assert "malformed_request" in bad.content.decode()


def test_the_history_page_shows_the_decisions_beside_the_operations(
    client: Client, admin: Any
) -> None:
    _stepped(admin)
    panel = _panel(client.get("/").content.decode())  # the panel's look records the decision
    plan_id = re.search(r'name="plan_id" value="([0-9a-f]{32})"', panel).group(1)  # type: ignore[union-attr]
    client.post("/pipelines/wordcount/autoscaling/apply", {"plan_id": plan_id})
    op = RescaleOperation.objects.get()
    page = client.get("/operations/").content.decode()
    table = re.search(r'<table[^>]*id="decisions-table".*?</table>', page, re.S)
    assert table, "no decisions table"
    row = re.search(r'<tr[^>]*data-kind="scale"[^>]*>.*?</tr>', table.group(0), re.S)
    assert row and 'data-outcome="applied"' in row.group(0)
    cells = row.group(0)
    assert "word_count 2 → 3 (60 % busy after)" in cells
    assert "word_count: 900/s, 500, 90 %, not reported" in cells
    assert f'href="/operations/{op.operation_id}/"' in cells and "applied by admin" in cells
    assert plan_id[:8] in cells
    # filtered as the API filters, with the page's prefix
    only = client.get("/operations/", {"decisions-outcome": "refused"}).content.decode()
    assert "No decision matches" in only
    bad = client.get("/operations/", {"decisions-outcome": "maybe"}).content.decode()
    assert 'role="alert"' in bad and "maybe" in bad


def test_the_panel_charts_the_signals_and_prints_them(client: Client, admin: Any) -> None:
    """The chart's columns come embedded (drawn by charts.js); without JavaScript the recent
    epochs are a table: input rate, capacity (500 per busy s per PU × 2), busy share."""
    _stepped(admin)
    panel = _panel(client.get("/").content.decode())
    chart = re.search(
        rf'<script id="signals-{PIPELINE}-word_count" type="application/json">(.*?)</script>',
        panel,
        re.S,
    )
    assert chart, "no embedded series"
    columns = json.loads(chart.group(1))
    # the epochs of the last 120 s (59 intervals, fewer when the page is slow to be asked)
    assert 50 <= len(columns["at"]) <= 59
    assert len(columns["at"]) == len(columns["capacity"]) == len(columns["busy_fraction"])
    assert columns["input_rate"][-1] == pytest.approx(900)
    assert f'data-series="signals-{PIPELINE}-word_count"' in panel
    table = re.search(
        r'<table class="decisions signals-table" data-fragment="word_count">.*?</table>',
        panel,
        re.S,
    )
    assert table, "no table of the recent epochs"
    rows = re.findall(r"<tr data-epoch=\"(\d+)\"[^>]*>(.*?)</tr>", table.group(0), re.S)
    assert [int(epoch) for epoch, _ in rows] == list(range(59, 49, -1))
    newest = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", rows[0][1])).split()
    assert newest == ["59", "2", "900/s", "1,000/s", "500", "90", "%", "1.00"]


def test_a_runner_without_busy_seconds_charts_them_as_not_reported(
    client: Client, admin: Any
) -> None:
    register_cluster(epochs=0)
    report_epochs(count=20, records=lambda e, pu: 500)
    panel = _panel(client.get("/").content.decode())
    table = re.search(r'<table class="decisions signals-table".*?</table>', panel, re.S)
    assert table and "not reported" in table.group(0)
    chart = re.search(r'<script id="signals-[^"]+" type="application/json">(.*?)</script>', panel)
    assert chart and set(json.loads(chart.group(1))["busy_fraction"]) == {None}


def test_the_decisions_link_their_csv_with_the_pages_filters(client: Client, admin: Any) -> None:
    _stepped(admin)
    client.get("/")  # the panel's look records the decision
    page = client.get("/operations/").content.decode()
    link = re.search(
        r'<a class="button" href="([^"]+)" data-pipeline="wordcount">([^<]+)</a>', page
    )
    assert link, "no CSV link"
    assert link.group(1) == "/api/v1/pipelines/wordcount/autoscaling/decisions?format=csv"
    assert link.group(2) == "These decisions as CSV"
    filtered = client.get(
        "/operations/",
        {
            "decisions-pipeline": PIPELINE,
            "decisions-kind": "scale",
            "decisions-outcome": "proposed",
            "decisions-decided_after": "2020-11-01T09:30",
        },
    ).content.decode()
    url = re.search(r'href="([^"]+)" data-pipeline="wordcount"', filtered).group(1)  # type: ignore[union-attr]
    assert url == (
        "/api/v1/pipelines/wordcount/autoscaling/decisions?format=csv&amp;kind=scale"
        "&amp;outcome=proposed&amp;decided_after=2020-11-01T09%3A30%3A00"
    )
    # the link answers the rows the page shows
    api = client.get(url.replace("&amp;", "&"))
    assert api.status_code == 200 and api["Content-Type"].startswith("text/csv")
    rows = b"".join(api.streaming_content).decode().splitlines()
    assert len(rows) == 2 and ",scale," in rows[1]
    # a pipeline that has no decision: said, and no link
    unknown = client.get("/operations/", {"decisions-pipeline": "nope"}).content.decode()
    assert "no pipeline named" in unknown and "data-pipeline=" not in unknown


def test_apply_short_of_pus_asks_the_provider_and_the_history_shows_it(
    client: Client, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The panel says how many workers its Apply asks for; Apply asks the worker provider
    (faked at its boundary), once; the History page's Workers column says so."""
    provider = FakeProvider()
    monkeypatch.setattr("rescaler.runner.workers.machines.provider_from_env", lambda: provider)
    short_of_one_pu(admin, "recommend")
    panel = _panel(client.get("/").content.decode())
    assert 'id="autoscaling-workers-wordcount"' in panel and "1 more worker." in panel
    assert "autoscaling-apply-wordcount" not in panel  # no partial plan to apply instead
    assert provider.added == []
    response = client.post(
        "/pipelines/wordcount/autoscaling/apply", {"workers": "ask"}, follow=True
    )
    assert "awaiting_workers" in response.content.decode() and provider.added == [2]
    client.post("/pipelines/wordcount/autoscaling/apply", {"workers": "ask"})
    assert provider.added == [2]
    page = client.get("/operations/").content.decode()
    row = re.search(r'<tr[^>]*data-outcome="awaiting_workers"[^>]*>.*?</tr>', page, re.S)
    assert row and "asked for 1" in row.group(0)
