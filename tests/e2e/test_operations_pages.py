"""Rescale, operation and history pages in a real browser, on a registered cluster (no runner,
no Celery: an accepted operation stays pending, which is what the pages must then show)."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.step_phases import PHASE_INDEX
from rescaler import events
from rescaler.audit.models import AuditEvent
from rescaler.operations.models import OperationPlan, RescaleOperation
from rescaler.operations.progress import operation_progress_record
from rescaler.operations.requests import operation_request
from tests.e2e.conftest import screenshot, sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import (
    FRAGMENT,
    PIPELINE,
    make_user,
    move_the_mapping,
    register_cluster,
    request_body,
)
from workers.rescale.protocol import (
    OperationProgress,
    OperationStatus,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def cluster(live_url: str) -> None:
    as_the_runner(lambda: register_cluster(vnodes=16, initial_pus=(0, 1)) and None)


def test_an_operator_previews_the_plan_then_starts_the_rescale(
    browser: Any, live_url: str, cluster: None
) -> None:
    page = sign_in(browser, live_url, "operator", perms=("rescale",))
    page.get_by_role("link", name="Rescale", exact=True).click()
    page.get_by_label("Fragment", exact=True).select_option(FRAGMENT)

    # a refusal is shown next to the field it concerns, and nothing is created
    page.locator('input[name="remove"][value="0"]').check()
    page.locator('input[name="remove"][value="1"]').check()
    page.get_by_label("Reason (goes to the audit trail)", exact=True).fill("e2e: remove everything")
    page.get_by_role("button", name="Preview plan").click()
    error = page.locator('.field[data-field="remove"] .field-error')
    error.wait_for()
    assert "removes_every_parallel_unit" in error.inner_text()
    assert page.get_by_role("button", name="Start rescale").is_disabled()

    # scale out 2 -> 4 by the number of PUs; the plan is drawn against the placement
    page.locator('input[name="remove"]:checked').first.uncheck()
    page.locator('input[name="remove"]:checked').first.uncheck()
    page.get_by_label("Number of parallel units", exact=True).fill("4")
    page.get_by_label("Reason (goes to the audit trail)", exact=True).fill(
        "e2e: more room for the evening peak"
    )
    page.get_by_role("button", name="Preview plan").click()
    plan = page.locator("#plan")
    plan.get_by_text("scale out:").wait_for()
    assert page.locator('input[name="add"]:checked').count() == 2, "the server ticked them"
    assert "8 vnodes move" in plan.inner_text()
    after = plan.locator("table.plan tbody tr").nth(1).inner_text()
    assert "4 (-4)" in after and "4 (+4)" in after, after
    assert RescaleOperation.objects.count() == 0, "a preview creates nothing"
    screenshot(page, "rescale-plan")

    # the placement moves after the preview: Start is refused, never a plan the page did not show
    as_the_runner(move_the_mapping)
    page.get_by_role("button", name="Start rescale").click()
    refusal = page.locator("#form-error")
    refusal.wait_for()
    assert "plan_stale" in refusal.inner_text() and "version 1 to 2" in refusal.inner_text()
    assert page.get_by_role("button", name="Start rescale").is_disabled()
    assert RescaleOperation.objects.count() == 0

    # previewed again, against the new placement, the plan shown is the plan started
    page.get_by_role("button", name="Preview plan").click()
    page.get_by_text("Check the plan, then start it").wait_for()
    shown = OperationPlan.objects.order_by("-created_at").first()
    assert shown is not None and shown.mapping_versions == {FRAGMENT: 2}
    page.get_by_role("button", name="Start rescale").click()
    page.wait_for_url(f"{live_url}/operations/*/")
    op = RescaleOperation.objects.get()
    assert page.url.endswith(f"/operations/{op.operation_id}/")
    shown.refresh_from_db()
    assert shown.operation == op, "Start sent the plan_id of the plan it showed"
    requested = AuditEvent.objects.get(action="operation.requested")
    assert requested.actor_name == "operator"
    assert (requested.after or {}).get("reason") == "e2e: more room for the evening peak"

    # the operation page: pending, its planned vnodes counted and drawn, and why it waits
    page.locator("#op-waiting").wait_for()
    assert "orchestrator" in page.locator("#op-waiting").inner_text()
    counts = page.locator("#phase-counts-word_count")
    assert counts.locator('li[data-phase="planned"]').inner_text().split() == ["○", "8", "planned"]
    assert counts.locator('li[data-phase="owned"]').inner_text().split() == ["·", "8", "owned"]
    assert page.locator("canvas.vgrid-canvas").count() == 1

    def placement(pu: int) -> list[str]:
        return page.locator(f"#placement-word_count-{pu}").inner_text().split()

    # PU, before, planned, now
    assert [placement(pu) for pu in range(4)] == [
        ["PU", "0", "8", "4", "8"],
        ["PU", "1", "8", "4", "8"],
        ["PU", "2", "0", "4", "0"],
        ["PU", "3", "0", "4", "0"],
    ]
    assert page.get_by_role("button", name="Cancel operation").is_visible()
    page.locator("#live-state:text('live')").wait_for()
    screenshot(page, "operation-pending")

    # cancel is a form: unconfirmed, the server says so on the field; confirmed, it cancels
    page.get_by_role("button", name="Cancel operation").click()
    page.get_by_text("Tick the box to confirm the cancel.").wait_for()
    assert AuditEvent.objects.filter(action="operation.cancel_requested").count() == 0
    page.get_by_label("Yes, cancel it", exact=False).check()
    page.get_by_role("button", name="Cancel operation").click()
    page.locator("#op-status:text('cancelling')").wait_for()
    assert AuditEvent.objects.filter(action="operation.cancel_requested").count() == 1
    assert page.get_by_role("button", name="Cancel operation").count() == 0

    # history lists it, filtered by status
    page.get_by_role("link", name="History").click()
    page.get_by_label("Status", exact=True).select_option("cancelling")
    page.get_by_role("form", name="Filter operations").get_by_role("button", name="Filter").click()
    assert page.locator("table.history tbody tr").count() == 1
    assert op.operation_id in page.locator("table.history tbody").inner_text()
    page.get_by_label("Status", exact=True).select_option("completed")
    page.get_by_role("form", name="Filter operations").get_by_role("button", name="Filter").click()
    assert "No operation matches." in page.locator("table.history tbody").inner_text()
    screenshot(page, "history")


def test_a_viewer_sees_no_enabled_action(browser: Any, live_url: str, cluster: None) -> None:
    made: list[RescaleOperation] = []

    def request() -> None:
        operator = make_user("operator", rescale=True)
        op = operation_request(user=operator, body=request_body(added_parallel_units=[2]))
        assert isinstance(op, RescaleOperation)
        made.append(op)

    as_the_runner(request)
    page = sign_in(browser, live_url, "viewer")
    page.goto(f"{live_url}/rescale/")
    assert page.get_by_role("button", name="Preview plan").is_disabled()
    assert "needs the permission" in page.locator("#rescale-title + p").inner_text()
    page.goto(f"{live_url}/operations/{made[0].operation_id}/")
    page.locator("#live-state:text('live')").wait_for()
    assert page.get_by_role("button", name="Cancel operation").count() == 0


@pytest.mark.parametrize("path", ["operation", "/rescale/", "/operations/", "/audit/", "/"])
def test_pages_fit_a_phone_without_scrolling_sideways(
    browser: Any, live_url: str, cluster: None, path: str
) -> None:
    """At 390 px (a phone), no page is wider than the screen: wide tables scroll in their own
    box, long words and codes wrap."""
    made: list[RescaleOperation] = []

    def request() -> None:
        operator = make_user("phone-operator", rescale=True)
        body = {**request_body(added_parallel_units=[2, 3]), "reason": "x" * 120}
        op = operation_request(user=operator, body=body)
        assert isinstance(op, RescaleOperation)
        made.append(op)

    as_the_runner(request)
    page = sign_in(browser, live_url, "phone", perms=("rescale",))
    page.set_viewport_size({"width": 390, "height": 844})
    failed: list[str] = []  # a missing favicon, script or style would be one
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    url = f"/operations/{made[0].operation_id}/" if path == "operation" else path
    page.goto(f"{live_url}{url}")
    if path == "operation":
        page.locator("#live-state:text('live')").wait_for()
        page.locator("#steps-table tbody tr").first.wait_for()
    widths = page.evaluate(
        "({doc: document.documentElement.scrollWidth, view: window.innerWidth,"
        " wide: [...document.querySelectorAll('body *')].filter((e) =>"
        " e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.matrix-wrap'))"
        ".slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + e.className)})"
    )
    screenshot(page, f"phone-{path.strip('/') or 'cluster'}")
    assert widths["doc"] <= widths["view"], widths
    assert failed == []


def scale_out_requested() -> RescaleOperation:
    """A 2 -> 4 scale-out of the cluster, requested by an operator (it stays pending)."""
    made: list[RescaleOperation] = []

    def request() -> None:
        operator = make_user("operator", rescale=True)
        op = operation_request(user=operator, body=request_body(added_parallel_units=[2, 3]))
        assert isinstance(op, RescaleOperation)
        made.append(op)

    as_the_runner(request)
    return made[0]


def test_the_operation_page_applies_each_delta_and_rereads_after_a_missed_one(
    browser: Any, live_url: str, cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = scale_out_requested()
    specs = {s.step: s.spec() for s in op.steps.all()}

    def report(phases: dict[int, StepPhase], keys: dict[int, int]) -> None:
        """The runner's report at a barrier: these steps in these phases, with keys moved."""
        steps = [
            StepProgress(
                step=n,
                fragment=specs[n].fragment,
                source_pu=specs[n].source_pu,
                target_pu=specs[n].target_pu,
                vnodes=specs[n].vnodes,
                phase=phase,
                keys_moved=keys.get(n, 0),
            )
            for n, phase in phases.items()
        ]
        progress = OperationProgress(
            operation_id=op.operation_id,
            strategy=Strategy(op.strategy),
            fragments=tuple(op.fragments),
            status=OperationStatus.RUNNING,
            phase=StopStartPhase.BEGUN,
            begun_epoch=3,
            keys_moved=sum(keys.values()),
            steps=tuple(steps),
        ).to_json()
        as_the_runner(lambda: operation_progress_record(pipeline=PIPELINE, progress=progress))

    page = sign_in(browser, live_url, "watcher")
    reads: list[str] = []  # the page re-reading its live part (htmx, told by the server)
    page.on(
        "request",
        lambda r: reads.append(r.url) if r.headers.get("hx-target") == "operation-live" else None,
    )
    page.goto(f"{live_url}/operations/{op.operation_id}/")
    page.locator("#live-state:text('live')").wait_for()
    page.wait_for_timeout(300)
    assert reads == [], "a page rendered at the current version does not re-read"
    assert page.locator('#steps-table tr[data-phase="collecting"]').count() == 0

    # version 1 never reaches the page (an event dropped, as while Redis restarts)...
    publish = events.publish
    monkeypatch.setattr(
        events,
        "publish",
        lambda group, *rest: None if group.startswith("operation_") else publish(group, *rest),
    )
    report({1: StepPhase.COLLECTING}, {})
    monkeypatch.setattr(events, "publish", publish)
    page.wait_for_timeout(300)
    assert page.locator('#steps-table tr[data-phase="collecting"]').count() == 0
    # ... so version 2, which says only step 2 changed, makes it read its live part again
    report({1: StepPhase.COLLECTING, 2: StepPhase.COLLECTING}, {})
    page.locator('#steps-table tr[data-phase="collecting"] >> nth=1').wait_for()
    assert len(reads) == 1, "the missed version made the page re-read"
    assert page.locator('#steps-table tr[data-phase="collecting"]').count() == 2

    # version 3, the next one, is swapped in as rendered rows: nothing is re-read
    report({1: StepPhase.COLLECTING, 2: StepPhase.EXPORTED}, {2: 1234})
    page.locator('#steps-table tr[data-phase="exported"]').wait_for()
    row = page.locator('#steps-table tr[data-phase="exported"]').inner_text()
    assert "1,234" in row, row
    page.locator("#keys-text:has-text('1,234')").wait_for()
    assert len(reads) == 1, "the delta was applied without a read"
    # the grid's canvas was patched in place: step 2's vnodes are exported
    step2 = op.steps.get(step=2)
    phases = page.evaluate(
        "(vnodes) => vnodes.map((v) => window.rescalerGrid.grids.get('word_count').phases[v])",
        list(step2.vnodes),
    )
    assert phases == [PHASE_INDEX["exported"]] * len(step2.vnodes)
    screenshot(page, "operation-delta")


def test_a_delta_s_rows_and_the_rest_parse_from_one_message_as_htmx_parses_it(
    browser: Any, live_url: str, cluster: None
) -> None:
    """The page's socket sends a delta as one message, its table rows first. Chromium parses it
    as htmx does (the contents of a <template>): every row and every other part of the delta is
    one of the template's children, each swapped in by id. A <table> after the rows would not
    be (``dashboard.live.TABLE_MARKUP``: such a rest goes apart)."""
    from dashboard.live import operation_delta_html

    op = scale_out_requested()
    steps = list(op.steps.order_by("step")[:2])
    events = list(AuditEvent.objects.filter(action="operation.requested"))
    (html,) = operation_delta_html(operation=op, steps=steps, events=events, waiting=None)

    page = browser.new_page()
    parse = """(html) => {
        const doc = new DOMParser().parseFromString(
            '<body><template>' + html + '</template></body>', 'text/html');
        return Array.from(doc.querySelector('template').content.children).map(
            (e) => `${e.tagName.toLowerCase()}#${e.id || e.getAttribute('hx-swap-oob')}`);
    }"""
    children = page.evaluate(parse, html)
    rows = [c for c in children if c.startswith("tr#")]
    assert rows[:2] == [f"tr#step-{s.step}" for s in steps]
    assert len(rows) == html.count("<tr ")
    rest = children[len(rows) :]
    assert rest[0] == "div#op-summary" and "div#vnode-patch" in rest
    assert rest[-1] == "div#beforeend:#timeline"
    assert all(c.partition("#")[2] for c in children), children
    # the reason for TABLE_MARKUP: a table after the rows is taken apart by the table parser
    broken = page.evaluate(parse, html + '<table id="t"><tr><td>1</td></tr></table>')
    assert "table#t" not in broken
    page.close()
