"""Elastic workers in the console: the matrix's PU headers and the workers table (the view
models, dashboard/matrix.py and dashboard/cluster_workers.py), what each user is offered, and
the actions as the page sends them (a session, the page's CSRF token, the API) with their
permission and audit. The browser side is tests/e2e/test_workers_console.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dashboard.api.selectors.cluster import cluster_info
from dashboard.cluster_workers import WorkerRow, worker_rows
from dashboard.matrix import PuColumn, cluster_matrix
from rescaler.audit.models import AuditEvent
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Pipeline, Worker
from rescaler.runner.workers import tasks as worker_tasks
from rescaler.runner.workers import worker_cordon, worker_drain, workers_record
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from workers.control import PuLoad, WorkerInfo

pytestmark = pytest.mark.django_db

W1 = WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0)
W2 = WorkerInfo("w2", "2", "host-b", 2, (2, 3), True, 0)
W3 = WorkerInfo("w3", "3", "host-c", 2, (4, 5), True, 7)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Celery for the drain's operation, no provider thread for a removed worker."""
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    monkeypatch.setattr(worker_tasks, "release_later", lambda pk: None)


@pytest.fixture
def workers() -> Pipeline:
    """word_count on PUs 0, 1 (worker w1) and 2 (w2); PU 3 (w2) and w3's PUs 4, 5 run nothing."""
    pipeline = register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2))
    workers_record(pipeline=PIPELINE, epoch=0, workers=[W1, W2, W3])
    return pipeline


def columns() -> dict[int, PuColumn]:
    return {c.pu: c for c in cluster_matrix(cluster_info()).columns}


def rows() -> dict[str, WorkerRow]:
    return {w.name: w for w in worker_rows(cluster_info())}


# -- the view model ------------------------------------------------------------------------------
def test_headers_carry_the_workers_status_and_where_the_pu_ran(workers: Pipeline) -> None:
    worker_cordon(user=None, name="w2", reason="disk swap")
    # epoch 1: PU 0 ran at home, PU 2 on w1's executor (the state directory is shared)
    cluster_services.placement_record(
        epoch=1,
        per_pu=[
            PuLoad(FRAGMENT, 0, 1, 1, 1, executor="1", host="host-a"),
            PuLoad(FRAGMENT, 2, 1, 1, 1, executor="1", host="host-a"),
        ],
    )
    cols = columns()
    assert [cols[0].state, cols[2].state, cols[4].state] == ["active", "cordoned", "active"]
    assert (cols[0].ran_on, cols[0].locality) == ("1 @ host-a", 1.0)
    assert (cols[2].ran_on, cols[2].locality) == ("1 @ host-a", 0.0)
    assert (cols[1].ran_on, cols[1].locality) == ("", None), "no task counted yet"
    assert not any(c.lost for c in cols.values())


def test_a_lost_worker_marks_its_pus_lost(workers: Pipeline) -> None:
    workers_record(pipeline=PIPELINE, epoch=3, workers=[W1, W3])
    cols = columns()
    assert cols[2].lost and cols[3].lost and cols[2].state == "lost"
    assert not cols[2].alive
    assert not cols[0].lost
    w2 = rows()["w2"]
    assert w2.status == "lost" and w2.gone and "epoch 3" in w2.reason
    assert not (w2.can_cordon or w2.can_uncordon or w2.can_drain), "nothing to act on"


def test_a_removed_workers_pus_disappear_from_the_matrix(workers: Pipeline) -> None:
    drain = worker_drain(user=None, name="w3", reason="scale in")
    assert drain.operation is None, "w3 ran no stateful fragment: decommissioned at once"
    assert rows()["w3"].status == "decommissioning"
    assert {4, 5} <= set(columns())
    workers_record(pipeline=PIPELINE, epoch=4, workers=[W1, W2])
    assert set(columns()) == {0, 1, 2, 3}
    table = worker_rows(cluster_info())
    assert [w.name for w in table] == ["w1", "w2", "w3"], "the removed last, kept for the record"
    assert table[-1].status == "removed"


def test_a_removed_pu_a_fragment_still_lists_keeps_its_column() -> None:
    """A fault (a removed PU still in a fragment) is shown, not hidden with the PU's cells."""
    pu = {"worker": "w1", "alive": False, "fragments": ["f"], "status": "removed"}
    cluster: dict[str, Any] = {
        "workers": [{"name": "w1", "pipeline": "p", "alive": False, "parallel_units": [0, 1],
                     "status": "removed"}],
        "parallel_units": {"0": pu, "1": {**pu, "fragments": []}},
        "fragments": [{"name": "f", "pipeline": "p", "kind": "stateful", "vnodes": 2,
                       "parallel_units": [0], "mapping": [0, 0],
                       "load": {"per_parallel_unit": []}}],
    }  # fmt: skip
    matrix = cluster_matrix(cluster)
    assert [c.pu for c in matrix.columns] == [0]
    assert matrix.columns[0].state == "removed"
    assert matrix.rows[0].cells[0] is not None


def test_the_workers_table_offers_what_each_status_allows(workers: Pipeline) -> None:
    worker_cordon(user=None, name="w2")
    table = rows()
    w1, w2, w3 = table["w1"], table["w2"], table["w3"]
    assert (w1.can_cordon, w1.can_uncordon, w1.can_drain) == (True, False, True)
    assert (w2.can_cordon, w2.can_uncordon, w2.can_drain) == (False, True, True)
    assert (w1.executor_id, w1.host, w1.cores, w1.parallel_units) == ("1", "host-a", 2, (0, 1))
    assert w3.bootstrap == "epoch 7"
    assert WorkerRow(**{**w3.__dict__, "bootstrapped_epoch": -1}).bootstrap == "not yet"
    assert WorkerRow(**{**w3.__dict__, "bootstrapped_epoch": None}).bootstrap == "from the start"


# -- the page ------------------------------------------------------------------------------------
def signed_in(username: str, *, rescale: bool) -> Client:
    """A browser-like client: a session, and CSRF enforced as it is for a real browser."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(username, rescale=rescale))
    return client


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, "the page's forms carry the CSRF token"
    return found.group(1)


def test_the_page_shows_workers_and_a_lost_pu(workers: Pipeline) -> None:
    workers_record(pipeline=PIPELINE, epoch=3, workers=[W1, W3])
    page = signed_in("viewer", rescale=False).get("/").content.decode()
    assert 'id="workers"' in page and 'data-worker="w2" data-status="lost"' in page
    header = re.search(
        r'<th scope="col" class="pu state-lost lost"[^>]*data-pu="2".*?</th>', page, re.S
    )
    assert header and "lost" in re.sub(r"<[^>]+>", " ", header.group(0))
    assert "host-c" in page and "epoch 7" in page


def test_a_read_only_user_is_offered_no_action(workers: Pipeline) -> None:
    page = signed_in("viewer", rescale=False).get("/").content.decode()
    assert "Add worker" not in page and 'aria-label="Cordon w1"' not in page
    assert (
        'id="worker-action"'
        not in signed_in("viewer2", rescale=False)
        .get("/", {"act": "cordon", "on": "w1"})
        .content.decode()
    )
    assert "needs the permission" in page


def test_an_operator_is_offered_the_actions_the_status_allows(workers: Pipeline) -> None:
    worker_cordon(user=None, name="w2")
    page = signed_in("operator", rescale=True).get("/").content.decode()
    assert "Add worker" in page
    assert 'aria-label="Cordon w1"' in page and 'aria-label="Cordon w2"' not in page
    assert 'aria-label="Uncordon w2"' in page
    assert 'aria-label="Drain and remove w2"' in page


def test_the_cluster_partial_holds_the_matrix_and_the_workers(workers: Pipeline) -> None:
    body = signed_in("viewer", rescale=False).get("/partials/cluster").content.decode()
    assert 'id="matrix"' in body and 'id="workers"' in body


# -- the actions, as the page's forms send them --------------------------------------------------
def post(client: Client, url: str, body: dict[str, Any], token: str | None) -> Any:
    return client.post(url, {**body, **({"csrfmiddlewaretoken": token} if token else {})})


def worker_actions(name: str) -> list[str]:
    rows = AuditEvent.objects.filter(object_type="worker", object_id=name).order_by("id")
    return list(rows.values_list("action", flat=True))


def test_an_operator_cordons_and_uncordons_from_the_page(workers: Pipeline) -> None:
    client = signed_in("operator", rescale=True)
    page = client.get("/", {"act": "cordon", "on": "w1"}).content.decode()
    assert 'id="worker-action"' in page and "Cordon worker w1" in page
    token = csrf_of(page)
    done = post(client, "/workers/w1/cordon", {"reason": "kernel update"}, token)
    assert done.status_code == 302 and done["Location"] == "/"
    assert Worker.objects.get(name="w1").status == "cordoned"
    assert "Cordoned w1." in client.get("/").content.decode()
    audit = AuditEvent.objects.get(object_id="w1", action="worker.cordoned")
    assert audit.actor is not None and audit.actor.username == "operator"
    assert (audit.after or {})["reason"] == "kernel update"
    assert post(client, "/workers/w1/uncordon", {}, token).status_code == 302
    assert worker_actions("w1")[-2:] == ["worker.cordoned", "worker.uncordoned"]
    # a refusal of the service is shown on the form, as the API words it: w2 was lost
    workers_record(pipeline=PIPELINE, epoch=3, workers=[W1, W3])
    refused = post(client, "/workers/w2/cordon", {}, token)
    assert refused.status_code == 400
    assert "worker_status_conflict" in refused.content.decode()


def test_a_read_only_user_is_refused_and_nothing_is_recorded(workers: Pipeline) -> None:
    client = signed_in("viewer", rescale=False)
    token = csrf_of(client.get("/accounts/login/").content.decode())
    for url, body in (
        ("/workers/w1/cordon", {}),
        ("/workers/w1/drain", {"reason": "x", "confirm": "on"}),
        ("/workers/add", {"cores": 1}),
    ):
        assert post(client, url, body, token).status_code == 403, url
    assert worker_actions("w1") == ["worker.joined"]
    assert Worker.objects.get(name="w1").status == "active"


def test_without_the_pages_token_the_action_is_refused(workers: Pipeline) -> None:
    client = signed_in("operator", rescale=True)
    assert post(client, "/workers/w1/cordon", {}, None).status_code == 403
    assert Worker.objects.get(name="w1").status == "active"


def test_drain_from_the_page_is_confirmed_then_starts_an_audited_operation(
    workers: Pipeline,
) -> None:
    client = signed_in("operator", rescale=True)
    token = csrf_of(client.get("/", {"act": "drain", "on": "w2"}).content.decode())
    unconfirmed = post(client, "/workers/w2/drain", {"reason": "retire host-b"}, token)
    assert unconfirmed.status_code == 400
    assert "Tick the box to confirm the drain." in unconfirmed.content.decode()
    assert Worker.objects.get(name="w2").status == "active"
    started = post(client, "/workers/w2/drain", {"reason": "retire host-b", "confirm": "on"}, token)
    assert started.status_code == 302, started.content
    assert Worker.objects.get(name="w2").status == "draining"
    assert worker_actions("w2")[-1] == "worker.draining"
    operation_id = Worker.objects.get(name="w2").drain_operation_id
    page = client.get("/").content.decode()
    assert f"drain · {operation_id}" in page
    assert f"Draining w2. Operation {operation_id} moves its vnodes." in page


def test_add_worker_in_local_mode_shows_the_providers_refusal(
    workers: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RESCALER_WORKER_PROVIDER", raising=False)
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    client = signed_in("operator", rescale=True)
    token = csrf_of(client.get("/").content.decode())
    refused = post(client, "/workers/add", {"cores": 1}, token)
    assert refused.status_code == 400
    page = refused.content.decode()
    assert "worker_provider_refused" in page
    assert "no worker provider: local mode runs in one JVM" in page
    # the cores are checked by the service's own parser, on their field
    wrong = post(client, "/workers/add", {"cores": 65}, token).content.decode()
    assert "&#x27;cores&#x27; must be an integer from 1 to 64" in wrong
    assert not AuditEvent.objects.filter(action="worker.add_requested").exists()


def test_the_rescale_form_offers_no_cordoned_pu_to_add(workers: Pipeline) -> None:
    """The form would only meet worker_not_active; the fragment's PUs are offered for removal."""
    worker_cordon(user=None, name="w3")
    page = signed_in("operator", rescale=True).get("/rescale/").content.decode()
    add = re.search(r'<input type="checkbox" name="add" value="4"[^>]*>', page)
    assert add and "disabled" in add.group(0)
    assert re.search(r'name="remove" value="2"> PU 2 <span class="muted">w2', page)


def test_a_noticed_workers_row_shows_its_deadline(workers: Pipeline, settings: Any) -> None:
    from rescaler.runner.workers import worker_notice

    settings.RESCALER_PREEMPTION_POLICY = "cordon"
    worker_notice(user=None, name="w2", deadline_s=90, reason="spot interruption")
    deadline = Worker.objects.get(name="w2").notice_deadline
    assert deadline is not None
    row = rows()["w2"]
    assert row.status == "cordoned"
    assert row.notice_text == f"leaves by {deadline:%Y-%m-%d %H:%M:%S} UTC (platform notice)"
    assert rows()["w1"].notice_text == ""
    page = signed_in("viewer", rescale=False).get("/").content.decode()
    assert row.notice_text in page
