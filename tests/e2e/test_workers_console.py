"""Elastic workers on the cluster page, in a real browser: the workers table and the PU headers
show each worker's status, a lost worker's PUs say "lost", worker events pushed over the
websocket update the page without a reload, an operator cordons a worker from the page, and the
provider's refusal of "Add worker" in local mode is shown as the API words it."""

from __future__ import annotations

from typing import Any

import pytest

from rescaler.runner.workers import workers_record
from tests.e2e.conftest import screenshot, sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import PIPELINE, register_cluster
from workers.control import WorkerInfo

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

W1 = WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0)
W2 = WorkerInfo("w2", "2", "host-b", 2, (2, 3), True, 0)
W3 = WorkerInfo("w3", "3", "host-c", 1, (4,), True, 5)


def report(epoch: int, *seen: WorkerInfo) -> None:
    """The runner's worker report at ``epoch``, from a thread of its own (``as_the_runner``):
    the services publish the worker events the page listens to."""

    def run() -> None:
        workers_record(pipeline=PIPELINE, epoch=epoch, workers=list(seen))

    as_the_runner(run)


def row(page: Any, name: str) -> Any:
    return page.locator(f'#workers tr[data-worker="{name}"]')


def header(page: Any, pu: int) -> Any:
    return page.locator(f'table.matrix thead th.pu[data-pu="{pu}"]')


def test_workers_show_their_status_follow_events_live_and_can_be_cordoned(
    browser: Any, live_url: str
) -> None:
    def seed() -> None:
        register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2))
        workers_record(pipeline=PIPELINE, epoch=0, workers=[W1, W2])

    as_the_runner(seed)
    page = sign_in(browser, live_url, "operator", perms=("rescale",))
    page.wait_for_selector('#live-state:text("live")')
    page.evaluate("window.__notReloaded = true")

    # the table and the headers: every worker's status, executor, host, cores, PUs, bootstrap
    assert row(page, "w1").get_attribute("data-status") == "active"
    cells = row(page, "w2").locator("td").all_inner_texts()
    assert cells[:7] == ["w2", "active", "2", "host-b", "2", "2–3", "epoch 0"]
    assert "w2" in header(page, 2).inner_text() and "active" in header(page, 2).inner_text()

    # the runner no longer reports w2: lost, in the table and in its PUs' headers, no reload
    report(3, W1)
    page.wait_for_selector('#workers tr[data-worker="w2"][data-status="lost"]', timeout=10_000)
    page.wait_for_selector('table.matrix th.pu.lost[data-pu="2"]', timeout=10_000)
    assert "lost" in header(page, 2).inner_text() and "lost" in header(page, 3).inner_text()
    assert "lost" not in header(page, 0).inner_text()
    assert not row(page, "w2").locator("a.button").count(), "nothing to do to a lost worker"

    # a new worker joins: a row and a column appear, still without a reload
    report(5, W1, W3)
    row(page, "w3").wait_for(timeout=10_000)
    header(page, 4).wait_for(timeout=10_000)
    assert "epoch 5" in row(page, "w3").inner_text()
    assert page.evaluate("window.__notReloaded") is True

    # cordon w1: its form asks for the reason, the service does it, the page says so
    page.get_by_role("link", name="Cordon w1").click()
    form = page.locator("#worker-action")
    assert "Cordon worker w1" in form.inner_text()
    page.get_by_label("Reason (goes to the audit trail)").fill("kernel update")
    page.get_by_role("button", name="Cordon w1").click()
    page.wait_for_selector('#workers tr[data-worker="w1"][data-status="cordoned"]', timeout=10_000)
    assert page.locator("#worker-action").count() == 0
    assert "Cordoned w1." in page.locator(".messages").inner_text()
    assert "kernel update" in row(page, "w1").inner_text()
    assert "cordoned" in header(page, 0).inner_text()
    assert row(page, "w1").get_by_role("link", name="Uncordon w1").count() == 1

    # drain and remove w3 (it runs no stateful fragment: decommissioned at once): confirmed by
    # a tick box, and a reason is required, both said by the server on the form
    page.get_by_role("link", name="Drain and remove w3").click()
    page.get_by_role("button", name="Drain and remove w3").click()
    form = page.locator("#worker-action")
    assert "Tick the box to confirm the drain." in form.inner_text()
    assert "reason_required" in form.locator('[data-field="reason"] .field-error').inner_text()
    page.get_by_label("Reason (goes to the audit trail)").fill("scale in")
    page.get_by_label("Yes: move every vnode off it", exact=False).check()
    # a live refresh while the form is open (a worker event, or the 15 s poll) leaves the form
    # and what was typed in it: it used to swap in the cluster part without it
    page.evaluate("htmx.trigger(document.getElementById('cluster-page'), 'htmx:wsAfterMessage')")
    page.wait_for_timeout(1500)  # the refresh's 300 ms delay and its request, had it run
    assert page.get_by_label("Reason (goes to the audit trail)").input_value() == "scale in"
    assert page.get_by_label("Yes: move every vnode off it", exact=False).is_checked()
    page.get_by_role("button", name="Drain and remove w3").click()
    page.wait_for_selector(
        '#workers tr[data-worker="w3"][data-status="decommissioning"]', timeout=10_000
    )
    assert "Draining w3." in page.locator(".messages").inner_text()

    # local mode has no worker provider: the refusal is shown as the service words it
    page.get_by_role("button", name="Add worker").click()
    error = page.locator("#workers-error")
    error.wait_for(state="visible", timeout=10_000)
    assert error.inner_text().startswith("worker_provider_refused: cannot add a worker: no worker")
    assert "local mode runs in one JVM" in error.inner_text()
    screenshot(page, "workers")


def test_a_read_only_user_sees_workers_but_no_action(browser: Any, live_url: str) -> None:
    def seed() -> None:
        register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2))
        workers_record(pipeline=PIPELINE, epoch=0, workers=[W1, W2])

    as_the_runner(seed)
    page = sign_in(browser, live_url, "viewer")
    assert row(page, "w1").get_attribute("data-status") == "active"
    assert page.locator("#workers a.button").count() == 0
    assert page.get_by_role("button", name="Add worker").count() == 0
    assert "needs the permission" in page.locator("#workers-card").inner_text()
