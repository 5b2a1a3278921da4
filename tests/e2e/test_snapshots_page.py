"""The Snapshots page in a real browser: daphne reads a snapshot the runner's writers left in the
recovery location beside its STATE_DIR (and the record of a rebuild of lost stores in it), and
an operator presses "Snapshot now" (a plain form, no script), which queues one audited runner
command."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import RunnerCommand
from tests.e2e.conftest import screenshot, sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.integration.stack import Processes
from tests.unit.api.fixtures import PIPELINE, register_cluster
from tests.unit.api.snapshot_fixtures import FRAGMENT, rebuild, take_snapshot
from workers.recovery.location import RecoveryLocation
from workers.recovery.stores import StoreState

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_the_page_lists_a_snapshot_and_an_operator_snapshots_now(
    browser: Any, live_url: str, processes: Processes
) -> None:
    # the web process's STATE_DIR is <tmp>/state: its recovery location is <tmp>/recovery
    location = RecoveryLocation(processes.tmp / "recovery")
    snapshot = take_snapshot(
        location,
        pipeline=PIPELINE,
        epoch=4321,
        taken_at=time.time() - 300,
        keys_per_vnode=100,
        trigger="manual",
        requested_by="alice",
    )
    lost = (StoreState(FRAGMENT, 1, "corrupt", "data.mdb <differs>"),)
    rebuild(processes.tmp / "state", snapshot, lost=lost, epoch=4323)
    page = sign_in(browser, live_url, "operator", perms=("rescale",))
    as_the_runner(lambda: register_cluster() and None)  # a running runner, heartbeat fresh

    page.get_by_role("link", name="Snapshots", exact=True).click()
    page.wait_for_url(f"{live_url}/snapshots/")
    row = page.locator(f'tr[data-snapshot="{snapshot.snapshot_id}"]')
    cells = row.locator("th, td").all_inner_texts()
    assert cells[0] == snapshot.snapshot_id
    assert cells[1] == "4,321" and re.fullmatch(r"5 min \d+ s ago", cells[3]), cells
    assert cells[4] == "1,600" and cells[5] == f"{snapshot.bytes:,}"
    assert cells[7:10] == ["manual", "alice", "executor-0, executor-1"]
    # the last rebuild of lost stores: which, why (the check's text as text), where it ran
    lost_row = page.locator("table.lost-stores tbody tr").first.locator("td")
    assert lost_row.all_inner_texts() == [FRAGMENT, "1", "corrupt", "data.mdb <differs>"]
    assert page.locator("table.rebuild-tasks tbody td").nth(2).inner_text() == "host-1"
    assert "2 (4322–4323)" in page.locator("table.rebuild").inner_text()
    assert AuditEvent.objects.filter(action="store.rebuilt", actor_name="runner").count() == 1

    page.get_by_label("Reason (goes to the audit trail)").fill("e2e: <before> the deploy")
    page.get_by_role("button", name="Snapshot now").click()
    page.wait_for_url(f"{live_url}/snapshots/{PIPELINE}/")
    command = RunnerCommand.objects.get(kind="snapshot")
    assert command.payload == {"requested_by": "operator"} and command.status == "pending"
    event = AuditEvent.objects.get(action="snapshot.requested")
    assert event.actor_name == "operator" and event.after["reason"] == "e2e: <before> the deploy"
    status = page.get_by_role("status").first.inner_text()
    assert f"Snapshot requested (runner command {command.id})" in status
    request = page.locator("table.snapshot-requests tbody tr").first.locator("td")
    assert request.nth(2).inner_text() == "e2e: <before> the deploy"
    assert request.nth(4).inner_text() == "pending"
    screenshot(page, "snapshots")
