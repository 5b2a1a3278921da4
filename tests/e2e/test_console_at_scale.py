"""The console at the size issue 23 names: one fragment of 32,768 vnodes on 1,024 PUs of 64
workers, and a 2x scale-out of it (512 -> 1,024 PUs, 16,384 vnodes to move, one step each).
The cluster metadata is seeded in the database as the runner would report it; no Spark.

The read pages are driven with JavaScript disabled: what they show is what the server
rendered. The operation page is then followed live with htmx: a report at a barrier arrives as
rendered rows, swapped in without a reload, and the vnode grid's canvas is patched in place."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from dashboard.step_phases import PHASE_INDEX
from rescaler.operations.models import RescaleOperation
from rescaler.operations.progress import operation_progress_record
from rescaler.operations.requests import operation_request
from tests.e2e.conftest import screenshot
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from workers.rescale.protocol import (
    OperationProgress,
    OperationStatus,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(600)]

VNODES = 32_768
WORKERS = 64
PUS_PER_WORKER = 16  # 1,024 PUs
PUS = WORKERS * PUS_PER_WORKER


@pytest.fixture
def at_scale(live_url: str, monkeypatch: pytest.MonkeyPatch) -> RescaleOperation:
    """The cluster, and a pending 2x scale-out of it (no Celery: it stays pending)."""

    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    made: list[RescaleOperation] = []

    def seed() -> None:
        workers = {
            f"w{n:02d}": list(range(n * PUS_PER_WORKER, (n + 1) * PUS_PER_WORKER))
            for n in range(WORKERS)
        }
        register_cluster(
            vnodes=VNODES, workers=workers, initial_pus=tuple(range(0, PUS, 2)), epochs=1
        )
        body = {
            "changes": {FRAGMENT: {"added_parallel_units": list(range(1, PUS, 2))}},
            "granularity": {"vnodes_per_step": 1},
            "reason": "e2e: double the PUs for the sale",
        }
        op = operation_request(user=make_user("planner", rescale=True), body=body)
        assert isinstance(op, RescaleOperation)
        made.append(op)

    as_the_runner(seed)
    return made[0]


def sign_in_context(browser: Any, live_url: str, username: str, *, javascript: bool) -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username, password=f"pw-{username}")
    user.user_permissions.add(Permission.objects.get(codename="rescale"))
    context = browser.new_context(
        java_script_enabled=javascript, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    page.goto(f"{live_url}/accounts/login/?next=/operations/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(f"pw-{username}")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_url}/operations/")
    return page


def words(page: Any, selector: str) -> str:
    return re.sub(r"\s+", " ", page.locator(selector).inner_text())


def test_the_read_pages_are_complete_without_javascript(
    browser: Any, live_url: str, at_scale: RescaleOperation
) -> None:
    op = at_scale
    page = sign_in_context(browser, live_url, "reader", javascript=False)

    # history: the operation with its reason and numbers with separators; sortable by a link
    row = words(page, f'table.history tr[data-operation="{op.operation_id}"]')
    assert "e2e: double the PUs for the sale" in row and "pending" in row
    page.get_by_role("link", name="Keys", exact=True).click()
    page.wait_for_url("**sort=keys_moved**")
    page.get_by_role("link", name=op.operation_id).click()
    page.wait_for_url(f"**/operations/{op.operation_id}/")

    # the operation page: the head, counts by phase, placement, steps, timeline, cancel form
    started = time.monotonic()
    page.goto(f"{live_url}/operations/{op.operation_id}/")
    first_render = time.monotonic() - started
    assert "0 of 16,384 (0 %)" in words(page, "#vnodes-text")
    counts = words(page, "#phase-counts-word_count")
    assert "16,384 planned" in counts and "16,384 owned" in counts
    assert words(page, "#placement-word_count-1").split() == ["PU", "1", "0", "32", "0"]
    assert words(page, "#placement-word_count-0").split() == ["PU", "0", "64", "32", "64"]
    assert page.locator("#steps-table tbody tr").count() == 100, "100 steps to a page"
    assert "0 of 16,384 steps done" in words(page, "#op-summary")
    assert "operation.requested" in words(page, "#timeline")
    assert page.get_by_role("button", name="Cancel operation").is_visible()
    # a step column sorts the steps (the server's order, by a link)
    page.locator("#steps-table thead").get_by_role("link", name="Step").click()
    page.wait_for_url("**sort=-step**")
    assert page.locator("#steps-table tbody tr").first.get_attribute("id") == "step-16384"
    screenshot(page, "scale-operation-nojs")
    print(f"operation page at {VNODES:,} vnodes, first render without JS: {first_render:.2f}s")

    # the cluster page: 1,024 PUs shown as 64 workers, one of them opened onto its 16 PUs
    page.goto(f"{live_url}/")
    assert page.locator("table.matrix thead th.worker-col").count() == WORKERS
    cell = page.locator(f'a.cell[data-fragment="{FRAGMENT}"][data-column="worker-w00"]')
    assert cell.inner_text() == "512", "w00 runs PUs 0, 2, …, 14: 8 × 64 vnodes"
    page.get_by_role("link", name="keys", exact=True).click()
    page.wait_for_url("**metric=keys**")
    cell.click()
    page.wait_for_url("**cell=**")
    assert "vnodes: " in words(page, "#cell-detail")
    page.locator("table.matrix thead").get_by_role("link", name="w01", exact=True).click()
    page.wait_for_url("**worker=w01**")
    assert page.locator("table.matrix thead th.pu").count() == PUS_PER_WORKER
    assert page.locator("#workers table tbody tr").count() == WORKERS
    page.locator("#workers table thead").get_by_role("link", name="Worker").click()
    page.wait_for_url("**workers-sort=**")
    screenshot(page, "scale-cluster-nojs")


def test_the_operation_page_follows_a_barrier_live_with_htmx(
    browser: Any, live_url: str, at_scale: RescaleOperation
) -> None:
    op = at_scale
    page = sign_in_context(browser, live_url, "watcher", javascript=True)
    started = time.monotonic()
    page.goto(f"{live_url}/operations/{op.operation_id}/")
    page.locator("#live-state:text('live')").wait_for()
    loaded = time.monotonic() - started
    page.evaluate("window.__sameDocument = true")
    grid = "window.rescalerGrid.grids.get('word_count')"
    assert page.evaluate(f"{grid}.phases.length") == VNODES

    steps = {s.step: s for s in op.steps.filter(step__lte=8)}

    def report() -> None:
        progress = OperationProgress(
            operation_id=op.operation_id,
            strategy=Strategy(op.strategy),
            fragments=tuple(op.fragments),
            status=OperationStatus.RUNNING,
            phase=StopStartPhase.BEGUN,
            begun_epoch=3,
            keys_moved=80,
            steps=tuple(
                StepProgress(
                    step=n,
                    fragment=s.fragment,
                    source_pu=s.source_pu,
                    target_pu=s.target_pu,
                    vnodes=tuple(s.vnodes),
                    phase=StepPhase.DONE,
                    keys_moved=10,
                )
                for n, s in steps.items()
            ),
        ).to_json()
        operation_progress_record(pipeline=PIPELINE, progress=progress)

    # when htmx has swapped the delta in, by the page's clock (the same machine's): not when
    # Playwright, polling, sees it (that adds some 30 ms of its own)
    page.evaluate(
        "document.body.addEventListener('htmx:wsAfterMessage', "
        "() => { window.__appliedAt = Date.now() / 1000; })"
    )
    sent_at = time.time()
    sent = time.monotonic()
    as_the_runner(report)
    page.locator('#step-1[data-phase="done"]').wait_for()
    seen = time.monotonic() - sent
    applied = page.evaluate("window.__appliedAt") - sent_at
    assert "8 of 16,384 steps done" in words(page, "#op-summary")
    assert "8 done" in words(page, "#phase-counts-word_count")
    vnodes = [int(v) for s in steps.values() for v in s.vnodes]
    phases = page.evaluate(f"(vs) => vs.map((v) => {grid}.phases[v])", vnodes)
    assert phases == [PHASE_INDEX["done"]] * len(vnodes), "the canvas was patched in place"
    assert page.evaluate("window.__sameDocument === true"), "no reload"
    screenshot(page, "scale-operation-live")
    print(
        f"operation page at {VNODES:,} vnodes with htmx: loaded and live in {loaded:.2f}s; "
        f"a barrier's report applied {applied * 1000:.0f} ms after the runner sent it "
        f"(recorded, published, rendered, swapped; Playwright saw it at {seen * 1000:.0f} ms)"
    )
