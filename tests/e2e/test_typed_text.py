"""Text an operator types is shown as text on every page that shows it, in a real browser: a
reason holding HTML is neither parsed into elements nor run, whether the server rendered it or
a live update drew it."""

from __future__ import annotations

from typing import Any

import pytest

from rescaler.cluster.models import Worker
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from tests.e2e.conftest import sign_in
from tests.e2e.test_cluster_page import as_the_runner
from tests.unit.api.fixtures import make_user, register_cluster, request_body

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

# what a careless page would turn into an element that runs script, twice over
TYPED = "<img src=x onerror=\"window.__typed_ran=1\"><script>window.__typed_ran=2</script> & 'q'"


def _shown_as_text(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__typed_ran") is None, f"{url}: typed text ran as script"
    assert page.locator("img[src='x']").count() == 0, f"{url}: typed text became an element"
    assert TYPED in page.locator("body").inner_text(), f"{url}: the text is not shown as typed"


def test_a_reason_holding_html_is_text_on_every_page_that_shows_it(
    browser: Any, live_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setattr(
        "rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None
    )  # no Celery

    def cluster_and_operation() -> None:
        register_cluster(vnodes=16, initial_pus=(0, 1))
        operator = make_user("typist", rescale=True)
        op = operation_request(
            user=operator, body={**request_body(added_parallel_units=[2, 3]), "reason": TYPED}
        )
        assert isinstance(op, RescaleOperation)
        Worker.objects.update(status_reason=TYPED)

    as_the_runner(cluster_and_operation)
    op = RescaleOperation.objects.get()
    page = sign_in(browser, live_url, "reader")
    for url in (f"{live_url}/operations/{op.operation_id}/", f"{live_url}/operations/"):
        _shown_as_text(page, url)
    _shown_as_text(page, f"{live_url}/")  # the workers table: a cordon's reason
