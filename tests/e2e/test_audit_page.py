"""The Audit page in Chromium: reached from the navigation, every event listed, filtered by
actor, kind and pipeline (the API's filters), and the CSV of exactly the rows shown."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.runner.workers import worker_cordon
from tests.e2e.conftest import screenshot, sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster, request_body

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def trail(live_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """alice requests a rescale of wordcount (the orchestrator is not running: it stays
    pending), bob cordons its worker."""
    made: dict[str, Any] = {}
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)

    def happen() -> None:
        register_cluster(vnodes=16, initial_pus=(0, 1))
        op = operation_request(
            user=make_user("alice", rescale=True), body=request_body(added_parallel_units=[2])
        )
        assert isinstance(op, RescaleOperation)
        made["op"] = op
        worker_cordon(user=make_user("bob", rescale=True), name="local-0", reason="e2e: patching")

    as_the_runner(happen)
    return made


def rows(page: Any) -> list[list[str]]:
    """The table's rows as (time, actor, action, kind, object) cells."""
    body = page.locator("#audit-table tbody tr")
    return [
        [body.nth(i).locator("td").nth(c).inner_text().strip() for c in range(5)]
        for i in range(body.count())
    ]


def test_a_reader_filters_the_audit_and_downloads_what_it_shows(
    browser: Any, live_url: str, trail: dict[str, Any], tmp_path: Path
) -> None:
    op = trail["op"].operation_id
    page = sign_in(browser, live_url, "reader", role="viewer")
    page.get_by_role("link", name="Audit", exact=True).click()
    page.wait_for_url(f"{live_url}/audit/")
    shown = rows(page)
    assert len(shown) == AuditEvent.objects.count() >= 2
    by_action = {row[2]: row for row in shown}
    assert by_action["operation.requested"][1:] == ["alice", "operation.requested", "operation", op]
    assert by_action["worker.cordoned"][1:] == ["bob", "worker.cordoned", "worker", "local-0"]
    screenshot(page, "audit")

    page.get_by_label("Actor").fill("alice")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/?*actor=alice*")
    assert {row[1] for row in rows(page)} == {"alice"}
    # an operation's object opens its page
    page.get_by_role("link", name=op).first.click()
    page.wait_for_url(f"{live_url}/operations/{op}/")
    page.go_back()

    page.get_by_label("Actor").fill("")
    page.get_by_label("Kind", exact=True).select_option("worker")
    page.get_by_label("Pipeline", exact=True).select_option(PIPELINE)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/?*object_type=worker*")
    assert [row[1:] for row in rows(page)] == [["bob", "worker.cordoned", "worker", "local-0"]]

    page.get_by_label("Kind", exact=True).select_option("step")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/?*object_type=step*")
    assert "No audit event matches." in page.locator("#audit-table").inner_text()

    page.get_by_label("Kind", exact=True).select_option("")
    page.get_by_label("Actor").fill("bob")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/?*actor=bob*")
    with page.expect_download() as download:
        page.get_by_role("link", name="These events as CSV").click()
    saved = tmp_path / "audit.csv"
    download.value.save_as(saved)
    assert download.value.suggested_filename == "audit.csv"
    table = list(csv.DictReader(io.StringIO(saved.read_text())))
    expected = AuditEvent.objects.filter(actor_name="bob").order_by("-at", "-id")
    assert [int(r["id"]) for r in table] == [e.id for e in expected] and table
    assert {r["actor_name"] for r in table} == {"bob"}
    assert [r["action"] for r in table] == [row[2] for row in rows(page)]
