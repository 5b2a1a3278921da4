"""The console's pages render for a signed-in user, refuse visitors, and say 404 for unknown
operations. What they show is checked in a real browser (tests/e2e)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dashboard.api.selectors.cluster import cluster_info
from dashboard.matrix import cluster_matrix, skew
from rescaler.cluster.models import ParallelUnit, Worker
from rescaler.operations.models import OperationFragment, RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import parallel_units_closed_to_vnodes
from tests.unit.api.fixtures import (
    make_user,
    register_cluster,
    register_earlier_run,
    request_body,
    skew_the_load,
)

pytestmark = pytest.mark.django_db

PAGES = ("/", "/rescale/", "/operations/", "/partials/matrix")


@pytest.fixture
def signed_in(client: Client, monkeypatch: pytest.MonkeyPatch) -> Client:

    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    register_cluster(vnodes=16, initial_pus=(0, 1))
    client.force_login(make_user("someone", rescale=True))
    return client


@pytest.mark.parametrize("url", PAGES)
def test_visitors_are_sent_to_sign_in(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("url", PAGES)
def test_pages_render(signed_in: Client, url: str) -> None:
    response = signed_in.get(url)
    assert response.status_code == 200, response.content[:2000]


def test_operation_page_and_unknown_operation(signed_in: Client) -> None:
    user: Any = signed_in.get("/").wsgi_request.user
    op = operation_request(user=user, body=request_body(added_parallel_units=[2, 3]))
    assert isinstance(op, RescaleOperation)
    page = signed_in.get(f"/operations/{op.operation_id}/")
    assert page.status_code == 200 and op.operation_id in page.content.decode()
    assert b"Cancel operation" in page.content
    assert signed_in.get("/operations/nope/").status_code == 404
    listed = signed_in.get("/operations/", {"status": "pending"}).content.decode()
    assert op.operation_id in listed
    assert (
        op.operation_id not in signed_in.get("/operations/", {"status": "failed"}).content.decode()
    )
    bad = signed_in.get("/operations/", {"status": "bogus"})
    assert bad.status_code == 200 and "status" in bad.content.decode()


def test_the_matrix_counts_vnodes_per_pu_and_its_skew(signed_in: Client) -> None:
    matrix = cluster_matrix(cluster_info())
    assert [c.pu for c in matrix.columns] == [0, 1, 2, 3]
    (row,) = matrix.rows
    cells = {c.pu: c for c in row.cells if c is not None}
    assert (
        set(cells) == {0, 1} and cells[0].vnodes == 8 and cells[1].vnode_list == tuple(range(8, 16))
    )
    assert row.skew["vnodes"] == 1.0
    (ends,) = matrix.ends
    assert ends.source.startswith("JetStream stream WORDS") and ends.sink.startswith("postgres")
    page = signed_in.get("/partials/matrix").content.decode()
    assert "reads" in page and "JetStream stream WORDS" in page and "table counts" in page
    assert skew([]) is None and skew([0, 0]) is None and skew([3, 1]) == 1.5


@pytest.mark.parametrize("url", ["/", "/rescale/", "/operations/", "/accounts/login/"])
def test_every_page_names_its_icon_and_favicon_ico_is_served(client: Client, url: str) -> None:
    if url != "/accounts/login/":
        register_cluster(vnodes=16, initial_pus=(0, 1))
        client.force_login(make_user("someone"))
    page = client.get(url).content.decode()
    assert '<link rel="icon" href="/static/dashboard/favicon.svg" type="image/svg+xml">' in page
    icon = client.get("/static/dashboard/favicon.svg")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(icon.streaming_content)
    # pages that name no icon (the admin, the API docs) make browsers ask for /favicon.ico
    legacy = client.get("/favicon.ico")
    assert legacy.status_code == 302 and legacy["Location"] == "/static/dashboard/favicon.svg"


def test_history_shows_the_reason_and_numbers_as_the_other_pages_print_them(
    signed_in: Client,
) -> None:
    user: Any = signed_in.get("/").wsgi_request.user
    body = {**request_body(added_parallel_units=[2]), "reason": "evening <peak> & sale"}
    op = operation_request(user=user, body=body)
    assert isinstance(op, RescaleOperation)
    RescaleOperation.objects.filter(pk=op.pk).update(
        vnodes_moved=4, keys_moved=34467, bytes_moved=2_936_012
    )
    page = signed_in.get("/operations/").content.decode()
    assert re.search(r"<th[^>]*>\s*Reason\s*</th>", page)
    assert '<td class="reason">evening &lt;peak&gt; &amp; sale</td>' in page
    assert '<td class="num">34,467</td>' in page and '<td class="num">2.8 MB</td>' in page
    # sorted by a column from the query string, without a script
    RescaleOperation.objects.filter(pk=op.pk).update(status="completed")
    OperationFragment.objects.filter(operation=op).update(active=False)
    other = operation_request(user=user, body=request_body(added_parallel_units=[3]))
    assert isinstance(other, RescaleOperation)
    by_keys = signed_in.get("/operations/", {"sort": "-keys_moved"}).content.decode()
    assert by_keys.index(op.operation_id) < by_keys.index(other.operation_id)
    by_keys = signed_in.get("/operations/", {"sort": "keys_moved"}).content.decode()
    assert by_keys.index(other.operation_id) < by_keys.index(op.operation_id)
    # the CSV keeps raw numbers
    csv = signed_in.get("/api/v1/operations", {"format": "csv"})
    text = b"".join(csv.streaming_content).decode()
    assert ",34467,2936012," in text


def _add_box(page: str, pu: int) -> str:
    start = page.index(f'<input type="checkbox" name="add" value="{pu}"')
    return page[start : page.index(">", start) + 1]


def test_the_rescale_page_offers_only_the_pus_the_cluster_view_opens_to_vnodes(
    client: Client,
) -> None:
    """Which PU may take vnodes is ClusterView.vnode_refusal alone: the page disables the
    others (a cordoned, draining or unbootstrapped worker's, a lost PU, a dead worker's), as
    validation would refuse them, and says why."""
    register_cluster(
        vnodes=16,
        initial_pus=(0, 1),
        workers={
            "w1": [0, 1], "w2": [2], "w3": [3], "w4": [4], "w5": [5], "w6": [6], "w7": [7],
        },
    )  # fmt: skip
    Worker.objects.filter(name="w2").update(status="cordoned")
    Worker.objects.filter(name="w4").update(status="draining")
    ParallelUnit.objects.filter(number=5).update(status="lost")
    Worker.objects.filter(name="w6").update(bootstrapped_epoch=-1)  # joined, no stores yet
    Worker.objects.filter(name="w7").update(alive=False)
    closed = parallel_units_closed_to_vnodes()
    assert set(closed) == {2, 4, 5, 6, 7}
    assert "cordoned" in closed[2] and "not bootstrapped" in closed[6]
    assert "not alive" in closed[7]
    client.force_login(make_user("someone", rescale=True))
    page = client.get("/rescale/").content.decode()
    for pu in (2, 4, 5, 6, 7):
        assert "disabled" in _add_box(page, pu), pu
    assert "not alive" in _add_box(page, 7)  # the reason, on the box
    assert "disabled" not in _add_box(page, 3)
    for pu in (0, 1):  # in the fragment already: offered for removal only
        assert f'name="add" value="{pu}"' not in page and f'name="remove" value="{pu}"' in page


def test_the_matrix_is_shown_by_pu_or_by_worker_from_the_query_string(signed_in: Client) -> None:
    from dashboard.matrix import matrix_view

    matrix = cluster_matrix(cluster_info())
    by_pu = matrix_view(matrix)
    assert by_pu.by == "pu" and [c.label for c in by_pu.columns] == ["PU 0", "PU 1", "PU 2", "PU 3"]
    by_worker = matrix_view(matrix, by="worker", metric="keys", cell="word_count/worker-local-0")
    (column,) = by_worker.columns
    assert column.aggregated and column.label == "local-0" and len(column.pus) == 4
    (cell,) = by_worker.rows[0].cells
    assert cell is not None and (cell.vnodes, cell.value, cell.text) == (16, 160, "160")
    assert by_worker.selected is not None and by_worker.selected[1].vnode_text == "0–15"
    drilled = matrix_view(matrix, by="worker", worker="local-0", metric="nonsense")
    assert drilled.by == "pu" and drilled.metric == "vnodes" and len(drilled.columns) == 4

    page = signed_in.get("/", {"by": "worker", "metric": "bytes"}).content.decode()
    assert 'data-column="worker-local-0"' in page and 'data-by="worker"' in page
    assert "?by=worker&amp;metric=bytes&amp;cell=word_count%2Fworker-local-0" in page
    detail = signed_in.get("/", {"cell": "word_count/pu-1"}).content.decode()
    assert "vnodes: 8–15" in detail


def test_past_32_pus_the_matrix_is_one_column_per_worker() -> None:
    from dashboard.matrix import PU_COLUMNS_MAX, Matrix, PuColumn, matrix_view

    columns = tuple(PuColumn(pu=n, worker=f"w{n // 8}", alive=True) for n in range(64))
    view = matrix_view(Matrix(columns=columns, rows=(), epoch=None))
    assert len(columns) > PU_COLUMNS_MAX and view.by == "worker" and len(view.columns) == 8


def test_the_rescale_form_defaults_to_a_granularity_chosen_from_the_plan_s_size(
    signed_in: Client,
) -> None:
    """The page opens on ``auto``, and its preview says what the planner chose, and why."""
    page = signed_in.get("/rescale/").content.decode()
    assert re.search(r'<option value="auto"[^>]*selected', page)
    form = {"fragment": "word_count", "target": "4", "strategy": "live", "preset": "auto"}
    preview = signed_in.post("/rescale/", {**form, "reason": "more room", "action": "preview"})
    page = preview.content.decode()
    assert preview.status_code == 200 and "scale out: 8 vnodes move" in page
    assert "chosen from the plan&#x27;s size: 8 vnodes" in page


def test_the_rescale_form_previews_then_starts_exactly_the_plan_shown(signed_in: Client) -> None:
    """The page's form is the API's request: a dry run first, then its plan_id; the service's
    refusals land on the field the API names, "reason required" on the reason."""
    form = {
        "fragment": "word_count",
        "target": "4",
        "strategy": "live",
        "preset": "batched",
        "reason": "more room",
    }
    no_reason = signed_in.post("/rescale/", {**form, "reason": "", "action": "preview"})
    assert no_reason.status_code == 400 and "reason_required" in no_reason.content.decode()
    refused = signed_in.post(
        "/rescale/", {**form, "target": "", "remove": ["0", "1"], "action": "preview"}
    )
    page = refused.content.decode()
    box = page[
        page.index('data-field="remove"') : page.index(
            "</fieldset>", page.index('data-field="remove"')
        )
    ]
    assert "removes_every_parallel_unit" in box
    preview = signed_in.post("/rescale/", {**form, "action": "preview"})
    page = preview.content.decode()
    assert preview.status_code == 200 and "scale out: 8 vnodes move" in page
    # each transfer with the vnodes it moves, from the plan the dry run kept
    assert re.search(r"<td[^>]*>PU 0 → PU 2</td>\s*<td[^>]*>4</td>", page)
    assert '<td class="which">4–7</td>' in page
    assert '<td class="which">12–15</td>' in page and "2 steps" in page
    assert RescaleOperation.objects.count() == 0, "a preview creates nothing"
    plan_id = re.search(r'name="plan_id" value="([0-9a-f]+)"', page)
    assert plan_id is not None
    for pu in (2, 3):  # the target ticked the two lowest open PUs
        assert re.search(rf'name="add" value="{pu}" checked', page)
    started = signed_in.post(
        "/rescale/",
        {**form, "target": "", "add": ["2", "3"], "plan_id": plan_id[1], "action": "start"},
    )
    op = RescaleOperation.objects.get()
    assert started.status_code == 302 and started["Location"] == f"/operations/{op.operation_id}/"


def test_the_preview_says_which_hot_vnodes_a_key_cap_cuts_by_key(signed_in: Client) -> None:
    skew_the_load()  # vnode v holds 1000 * (v + 1) keys; 2 -> 4 moves vnodes 4-7 and 12-15
    form = {
        "fragment": "word_count",
        "target": "4",
        "strategy": "live",
        "preset": "custom",
        "vnodes_per_step": "1",
        "steps_in_flight": "1",
        "max_keys_per_step": "6000",
        "reason": "hot keys",
        "action": "preview",
    }
    page = signed_in.post("/rescale/", form).content.decode()
    # over 6,000 keys: vnodes 6 and 7 in 2 ranges, 12 to 15 in 3
    assert "6 hot vnodes over the step&#x27;s key or byte cap move key range by key range, " in page
    assert "in 16 steps." in page and "18 steps" in page


def test_the_key_finder_answers_on_the_page(signed_in: Client) -> None:
    from workers.hashing import vnode_of

    page = signed_in.get("/", {"kf": "word_count", "key": "hello", "metric": "keys"})
    html = page.content.decode()
    vnode = vnode_of("hello", 16)
    assert f"<dt>vnode</dt><dd>{vnode} (mapping v1)</dd>" in html
    assert f"<dt>owner now</dt><dd>PU {0 if vnode < 8 else 1}</dd>" in html
    assert '<input type="hidden" name="metric" value="keys">' in html, "the page's view is kept"
    unknown = signed_in.get("/", {"kf": "nope", "key": "x"}).content.decode()
    assert "unknown_fragment: no fragment &#x27;nope&#x27;" in unknown


@pytest.mark.parametrize(
    ("order", "said", "stored"),
    [
        ("first", "the hottest vnodes first", "first"),
        ("last", "the hottest vnodes last", "last"),
        ("", "by vnode number", None),
    ],
)
def test_the_rescale_form_orders_the_moves_by_measured_load(
    signed_in: Client, order: str, said: str, stored: str | None
) -> None:
    form = {
        "fragment": "word_count",
        "target": "4",
        "strategy": "live",
        "preset": "batched",
        "hot_vnodes": order,
        "reason": "hot keys",
        "action": "preview",
    }
    page = signed_in.post("/rescale/", form).content.decode()
    assert f"2 steps, {said}; estimated duration" in page
    plan_id = re.search(r'name="plan_id" value="([0-9a-f]+)"', page)
    assert plan_id is not None
    started = signed_in.post(
        "/rescale/",
        {**form, "target": "", "add": ["2", "3"], "plan_id": plan_id[1], "action": "start"},
    )
    assert started.status_code == 302
    granularity = RescaleOperation.objects.get().granularity
    assert granularity["hot_vnodes"] == stored and granularity["vnodes_per_step"] == 8


@pytest.mark.parametrize(
    ("described", "name"),
    [
        ("count", "count"),
        ("Sessions (row, time EventTime; value session<struct<start:bigint>>)", "Sessions"),
        ("Price (row, time None; value p<struct<d:decimal(10,2)>>)", "Price"),
        ("Sessions (row, time EventTime) → Totals (pandas, time None)", "Sessions → Totals"),
    ],
)
def test_the_matrix_names_an_operator_without_its_details(described: str, name: str) -> None:
    from dashboard.format import operator_name

    assert operator_name(described) == name


def test_a_pipeline_no_runner_reports_for_is_marked_and_not_preselected(signed_in: Client) -> None:
    """Issue 48: an earlier run's pipeline (its runner gone) was listed and preselected as if it
    were live. Its matrix row is marked "not running", and the rescale form opens on the
    fragment of the running pipeline, listing the other after it, marked."""
    register_earlier_run("aaa-earlier-run", "old_counts")  # named to sort first
    page = signed_in.get("/").content.decode()
    old = page[page.index('<tr data-fragment="old_counts"') :]
    old = old[: old.index("</tr>")]
    assert 'class="not-running"' in old and "not running</span>" in old
    live = page[page.index('<tr data-fragment="word_count"') :]
    assert "not running" not in live[: live.index("</tr>")]

    form = signed_in.get("/rescale/").content.decode()
    options = re.findall(r'<option value="(\w+)"([^>]*)>([^<]*)</option>', form)
    names = [name for name, _, _ in options if name in ("word_count", "old_counts")]
    assert names == ["word_count", "old_counts"]
    label = {name: text for name, _, text in options}
    assert (
        label["old_counts"].endswith("— not running") and "not running" not in label["word_count"]
    )
    assert not re.search(r'<option value="old_counts"[^>]*selected', form)

    # archived, it leaves the page and the form; archiving is for those who may rescale
    assert 'action="/pipelines/aaa-earlier-run/archive"' in page
    done = signed_in.post("/pipelines/aaa-earlier-run/archive", {"reason": "old run"}, follow=True)
    page = done.content.decode()
    assert "Archived pipeline aaa-earlier-run" in page and 'data-fragment="old_counts"' not in page
    assert "old_counts" not in signed_in.get("/rescale/").content.decode()
    refused = signed_in.post("/pipelines/wordcount/archive", follow=True).content.decode()
    assert "pipeline_archive_refused" in refused and 'data-fragment="word_count"' in refused
