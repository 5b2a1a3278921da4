"""The roles in Chromium: a viewer is offered no change and is refused one it sends anyway;
an operator previews a rescale (a dry run) from the same page."""

from __future__ import annotations

from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.operations.models import OperationPlan, RescaleOperation
from rescaler.operations.requests import operation_request
from tests.e2e.conftest import sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import FRAGMENT, make_user, register_cluster, request_body

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def cluster(live_url: str) -> None:
    as_the_runner(lambda: register_cluster(vnodes=16, initial_pus=(0, 1)) and None)


def _csrf(page: Any) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")


def test_a_viewer_sees_no_change_and_is_refused_one(
    browser: Any, live_url: str, cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[RescaleOperation] = []
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)

    def request() -> None:
        op = operation_request(
            user=make_user("operator", rescale=True), body=request_body(added_parallel_units=[2])
        )
        assert isinstance(op, RescaleOperation)
        made.append(op)

    as_the_runner(request)
    (op,) = made
    page = sign_in(browser, live_url, "vera", role="viewer")
    # the cluster page: no worker form, no worker action
    page.locator("#workers-card").wait_for()
    assert page.get_by_role("button", name="Add worker").count() == 0
    assert page.get_by_role("link", name="Cordon local-0").count() == 0
    # the rescale page: the preview cannot be pressed, and says why
    page.get_by_role("link", name="Rescale", exact=True).click()
    assert page.get_by_role("button", name="Preview plan").is_disabled()
    assert page.get_by_role("button", name="Start rescale").count() == 0 or (
        page.get_by_role("button", name="Start rescale").is_disabled()
    )
    # the operation page: no cancel
    page.goto(f"{live_url}/operations/{op.operation_id}/")
    page.locator("#live-state:text('live')").wait_for()
    assert page.get_by_role("button", name="Cancel operation").count() == 0

    # sent anyway, from the viewer's own session: refused, and nothing is recorded
    events = AuditEvent.objects.count()
    headers = {"X-CSRFToken": _csrf(page), "Referer": f"{live_url}/rescale/"}
    form = {"fragment": FRAGMENT, "add": "3", "reason": "e2e", "action": "preview"}
    refused = page.request.post(f"{live_url}/rescale/", form=form, headers=headers)
    assert refused.status == 403
    cancel = page.request.post(
        f"{live_url}/operations/{op.operation_id}/cancel", form={"confirm": "on"}, headers=headers
    )
    assert cancel.status == 403
    api = page.request.post(
        f"{live_url}/api/v1/operations",
        data={"changes": {FRAGMENT: {"added_parallel_units": [3]}}, "dry_run": True},
        headers=headers,
    )
    assert api.status == 403 and api.json()["code"] == "permission_denied"
    assert AuditEvent.objects.count() == events
    assert OperationPlan.objects.count() == 0
    op.refresh_from_db()
    assert op.cancel_requested_by is None and op.status == "pending"


def test_an_operator_previews_a_rescale(browser: Any, live_url: str, cluster: None) -> None:
    page = sign_in(browser, live_url, "otto", role="operator")
    assert page.get_by_role("button", name="Add worker").is_visible()
    page.get_by_role("link", name="Rescale", exact=True).click()
    page.get_by_label("Fragment", exact=True).select_option(FRAGMENT)
    page.locator('input[name="add"][value="2"]').check()
    page.get_by_label("Reason (goes to the audit trail)", exact=True).fill("e2e: an operator")
    page.get_by_role("button", name="Preview plan").click()
    plan = page.locator("#plan")
    plan.get_by_text("scale out:").wait_for()
    assert page.get_by_role("button", name="Start rescale").is_enabled()
    (shown,) = OperationPlan.objects.all()
    assert shown.requested_by is not None and shown.requested_by.get_username() == "otto"
    assert RescaleOperation.objects.count() == 0, "a dry run creates no operation"
