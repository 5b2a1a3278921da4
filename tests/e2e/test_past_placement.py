"""The placement of the past in a real browser: from an operation's page to the cluster page's
matrix as the operation found it, then through the kept versions to the newest and back to
the live placement (no runner, no Celery: the history is recorded as the runner records it)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import screenshot, sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import FRAGMENT, PlacementHistory, placement_history

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def history(live_url: str, monkeypatch: pytest.MonkeyPatch) -> PlacementHistory:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    made: list[PlacementHistory] = []
    as_the_runner(lambda: made.append(placement_history()))
    return made[0]


def _vnodes_per_pu(page: Any) -> dict[int, int]:
    found = page.locator(f'#matrix a.cell[data-fragment="{FRAGMENT}"]')
    return {
        int(found.nth(i).get_attribute("data-pu")): int(found.nth(i).inner_text())
        for i in range(found.count())
    }


def test_an_operation_s_before_opens_the_past_and_steps_through_its_versions(
    browser: Any, live_url: str, history: PlacementHistory
) -> None:
    page = sign_in(browser, live_url, "viewer")
    page.goto(f"{live_url}/operations/{history.operation_id}/")
    page.locator("a.placement-before").click()

    banner = page.locator("#past-placement")
    banner.wait_for()
    assert "A past placement" in banner.inner_text()
    assert "word_count at mapping v1" in banner.inner_text()
    assert page.locator("#live-state").inner_text() == "a past placement: not live"
    assert _vnodes_per_pu(page) == {0: 8, 1: 8}
    assert page.locator(".past-versions .previous").count() == 0, "v1 is the first kept"

    # step forward: the operation's versions, each naming it, then the gap to 5
    page.locator(".past-versions a.next").click()
    page.locator(".past-versions td.version:text-is('v2')").wait_for()
    assert _vnodes_per_pu(page) == {0: 4, 1: 8, 2: 4}
    made_by = page.locator(".past-versions td.made-by")
    assert history.operation_id in made_by.inner_text()
    screenshot(page, "past-placement-v2")

    page.locator(".past-versions a.next").click()
    page.locator(".past-versions td.version:text-is('v3')").wait_for()
    assert _vnodes_per_pu(page) == {0: 4, 1: 4, 2: 4, 3: 4}

    page.locator(".past-versions a.next").click()
    page.locator(".past-versions td.version:text-is('v5')").wait_for()
    assert "in effect now" in page.locator(".past-versions").inner_text()
    assert page.locator(".past-versions a.next").count() == 0

    # and back: the previous of 5 is 3 (4 was never kept)
    page.locator(".past-versions a.previous").click()
    page.locator(".past-versions td.version:text-is('v3')").wait_for()

    # the page stays in the past: no socket, nothing re-read after a while
    page.wait_for_timeout(1500)
    assert page.locator("#past-placement").count() == 1
    assert _vnodes_per_pu(page) == {0: 4, 1: 4, 2: 4, 3: 4}

    # an instant typed in the form: between 2 and 3 is 2
    page.get_by_label("Placement at").fill(history.recorded[2].isoformat())
    page.get_by_role("button", name="Show").click()
    page.locator(".past-versions td.version:text-is('v2')").wait_for()

    page.locator("#back-to-live").click()
    page.wait_for_url(f"{live_url}/")
    assert page.locator("#past-placement").count() == 0
    assert _vnodes_per_pu(page) == {0: 6, 1: 2, 2: 4, 3: 4}


def test_the_operation_s_after_is_the_last_version_it_made(
    browser: Any, live_url: str, history: PlacementHistory
) -> None:
    page = sign_in(browser, live_url, "viewer2")
    page.goto(f"{live_url}/operations/{history.operation_id}/")
    page.locator("a.placement-after").click()
    page.locator(".past-versions td.version:text-is('v3')").wait_for()
    assert _vnodes_per_pu(page) == {0: 4, 1: 4, 2: 4, 3: 4}
