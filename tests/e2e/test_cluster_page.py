"""The cluster page in a real browser: the fragment × PU matrix, its metrics, a cell's vnodes,
and a live update pushed over the websocket when the placement changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from rescaler.cluster import services as cluster_services
from tests.e2e.conftest import screenshot, sign_in
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, register_cluster
from workers.control import EpochReport, PuLoad, Topology
from workers.hashing import vnode_of

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def as_the_runner(action: Callable[[], None]) -> None:
    """Run ``action`` in a thread of its own, as the runner's reports arrive: Playwright's
    event loop in this thread would refuse the synchronous channel-layer publish."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # re-raised in the test's thread below
            failures.append(exc)
        finally:
            connection.close()  # this thread's own; left open it would outlive the test database

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    if failures:
        raise failures[0]


def cell(page: Any, pu: int) -> Any:
    return page.locator(f'a.cell[data-fragment="{FRAGMENT}"][data-pu="{pu}"]')


def test_the_matrix_shows_placement_and_follows_a_change_live(browser: Any, live_url: str) -> None:
    as_the_runner(lambda: register_cluster(vnodes=16, initial_pus=(0, 1)) and None)
    page = sign_in(browser, live_url, "viewer")

    # the matrix: one row per stateful fragment, a column per PU, a cell where it runs
    assert page.locator("table.matrix tbody tr").count() == 1
    assert page.locator("table.matrix thead th.pu").count() == 4  # PUs 0-3 of local-0
    assert cell(page, 0).inner_text() == "8" and cell(page, 1).inner_text() == "8"
    assert cell(page, 2).count() == 0, "the fragment does not run on PU 2"
    assert page.locator("td.skew").inner_text() == "1.00"

    # another metric: keys (register_cluster reports 10 keys per vnode), a link
    page.get_by_role("link", name="keys", exact=True).click()
    page.wait_for_url("**metric=keys**")
    assert cell(page, 0).inner_text() == "80"
    # a cell lists its vnodes, for the keyboard too
    cell(page, 1).focus()
    page.keyboard.press("Enter")
    detail = page.locator("#cell-detail")
    detail.wait_for()
    assert "word_count on PU 1" in detail.inner_text()
    assert "vnodes: 8–15" in detail.inner_text()
    page.wait_for_selector('#live-state:text("live")')
    assert page.locator("#epoch-charts").get_attribute("data-points") == "1"

    # the key finder: hash -> vnode -> the PU that owns it
    page.get_by_label("Key", exact=True).fill("hello")
    page.get_by_role("button", name="Find").click()
    facts = page.locator("#key-result dl")
    facts.wait_for()
    vnode = vnode_of("hello", 16)
    assert f"vnode{vnode} (mapping v1)" in facts.inner_text().replace("\n", "")
    assert f"owner nowPU {0 if vnode < 8 else 1}" in facts.inner_text().replace("\n", "")
    screenshot(page, "cluster")
    page.wait_for_selector('#live-state:text("live")')
    page.evaluate("window.__sameDocument = true")

    # the runner moves four vnodes to PU 2 and commits an epoch: the page follows, no reload
    mapping = [0] * 6 + [2] * 4 + [1] * 6

    def move_and_commit() -> None:
        cluster_services.topology_register(
            topology=Topology(
                pipeline=PIPELINE,
                workers={"local-0": [0, 1, 2, 3]},
                fragments={
                    FRAGMENT: {"kind": "stateful", "region": 1, "vnodes": 16, "key": "word",
                               "operator": "count", "parallel_units": [0, 1, 2], "mapping": mapping,
                               "version": 2},
                },
                spark={"alive": True, "master": "local[2]"},
            )
        )  # fmt: skip
        cluster_services.epoch_record(
            report=EpochReport(
                pipeline=PIPELINE, epoch=5, rows=10, malformed=0, duration_s=0.1,
                committed_at=time.time(), source_offset={"offset": 10},
                per_pu=[PuLoad(FRAGMENT, pu, 3, 10, 100) for pu in (0, 1, 2)],
                per_vnode={FRAGMENT: {v: (10, 100 + v) for v in range(16)}},
                mapping_versions={FRAGMENT: 2},
            )
        )  # fmt: skip

    published = time.monotonic()
    as_the_runner(move_and_commit)
    page.wait_for_selector(f'a.cell[data-fragment="{FRAGMENT}"][data-pu="2"]', timeout=10_000)
    seen = time.monotonic() - published
    assert page.locator("#epoch-charts").get_attribute("data-points") == "2", "charted live"
    assert page.locator("#chart-latency canvas").count() == 1
    assert cell(page, 2).inner_text() == "40", "the chosen metric (keys) is kept"
    assert page.evaluate("window.__sameDocument === true"), "followed without a reload"
    assert "vnodes: 10–15" in page.locator("#cell-detail").inner_text(), "the selection is kept"
    assert "mapping v2" in page.locator("table.matrix tbody th.frag").inner_text()
    print(f"placement change to matrix on screen: {seen:.2f}s")


def off_the_card(page: Any) -> list[int]:
    """The PUs whose matrix column ends past the matrix card's right edge, measured in one
    go (a live update may swap the matrix between two separate reads)."""
    return list(
        page.evaluate(
            """() => {
              const card = document.querySelector("#matrix").getBoundingClientRect();
              return [...document.querySelectorAll("table.matrix thead th.pu")]
                .filter((th) => th.getBoundingClientRect().right > card.right + 1)
                .map((th) => Number(th.dataset.pu));
            }"""
        )
    )


SESSIONS = (
    "Sessions (row, time EventTime; value session<struct<start:bigint,last:bigint,events:bigint,"
    "bytes:bigint>>; list recent<struct<page:string>>; map visits<struct<page:string>, "
    "struct<n:bigint>>; value total<struct<sessions:bigint>>)"
)


def test_a_long_state_schema_folds_and_every_pu_column_stays_in_view(
    browser: Any, live_url: str
) -> None:
    """Issue 48: a processor's whole state schema widened the fragment's column until the other
    PUs were off the card. At 1,440 px, with eight PUs, every PU column is in view; the
    description shows the processor's name and folds its state variables."""
    workers = {"local-0": [0, 1, 2, 3], "local-1": [4, 5, 6, 7]}
    as_the_runner(
        lambda: register_cluster(workers=workers, initial_pus=(0, 1), operator=SESSIONS) and None
    )
    page = sign_in(browser, live_url, "viewer")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.reload()
    assert page.locator("table.matrix thead th.pu").count() == 8
    assert off_the_card(page) == [], "every PU column in view"
    folded = page.locator("th.frag details.operator")
    assert folded.locator("summary").inner_text() == "by word · Sessions"
    assert not folded.locator(".operator-detail").is_visible()
    folded.locator("summary").click()
    assert "map visits<struct<page:string>" in folded.locator(".operator-detail").inner_text()
    # opened, it wraps within the column: still every PU in view
    assert off_the_card(page) == []
    screenshot(page, "cluster-long-schema")


def test_the_autoscaling_panel_charts_the_signals(browser: Any, live_url: str) -> None:
    """The panel's signal chart is drawn from the columns the page embeds, one point per epoch
    (the table under it is the page without JavaScript: tests/unit/test_console_autoscaling.py)."""
    from tests.unit.rescaler.autoscaling.fixtures import report_epochs

    def cluster() -> None:
        register_cluster(epochs=0)
        report_epochs(
            count=30, records=lambda e, pu: 900 if e >= 15 else 300, busy_s_per_record=0.002
        )

    as_the_runner(cluster)
    page = sign_in(browser, live_url, "viewer")
    plot = page.locator(f'.signal-plot[data-series="signals-{PIPELINE}-{FRAGMENT}"]')
    plot.locator("canvas").wait_for()
    assert plot.get_attribute("data-points") == "29"
    legend = plot.locator(".u-legend").inner_text()
    assert "input rate" in legend and "capacity" in legend and "busy" in legend
    plot.scroll_into_view_if_needed()
    screenshot(page, "autoscaling-signals")
