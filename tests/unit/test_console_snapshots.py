"""The console's Snapshots page, rendered on the server: the snapshots, the last restore, the
last rebuild of lost stores and the requests as the service reads them, and "Snapshot now" as a
plain form (CSRF, server-side validation, the permission, POST then redirect). The browser's
view is in tests/e2e."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline, RunnerCommand
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster
from tests.unit.api.snapshot_fixtures import FRAGMENT, rebuild, restore, take_snapshot
from workers.recovery.location import RecoveryLocation
from workers.recovery.restore import RESTORE_PROGRESS, begin_restore
from workers.recovery.stores import StoreState

pytestmark = pytest.mark.django_db

PAGE = f"/snapshots/{PIPELINE}/"


@pytest.fixture
def location(settings: Any, tmp_path: Path) -> RecoveryLocation:
    settings.STATE_DIR = tmp_path / "state"
    settings.RESCALER_RECOVERY_DIR = ""
    register_cluster()
    return RecoveryLocation(tmp_path / "recovery")


def _client(username: str, *, rescale: bool, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(make_user(username, rescale=rescale))
    return client


def _text(response: Any) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def _nothing_recorded() -> None:
    assert not RunnerCommand.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="snapshot.").exists()


@pytest.mark.parametrize("url", ["/snapshots/", PAGE])
def test_visitors_are_sent_to_sign_in(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_page_lists_snapshots_and_the_last_restore(
    location: RecoveryLocation, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    periodic = take_snapshot(
        location, pipeline=PIPELINE, epoch=1234, taken_at=now - 7200, keys_per_vnode=100
    )
    manual = take_snapshot(
        location,
        pipeline=PIPELINE,
        epoch=1300,
        taken_at=now - 125,
        trigger="manual",
        requested_by="<b>mallory</b>",
        duration_s=3.5,
    )
    monkeypatch.setenv("RESCALER_ACTOR", "night-shift")
    restore(Path(settings.STATE_DIR), periodic, pus=(0, 1, 2))
    viewer = _client("viewer", rescale=False)
    response = viewer.get("/snapshots/")  # the nav's link: the first pipeline
    assert response.status_code == 200
    page = _text(response)
    assert 'href="/snapshots/"' in page, "the navigation links the page"
    rows = re.findall(r'<tr data-snapshot="([^"]+)"', page)
    assert rows == [manual.snapshot_id, periodic.snapshot_id], "newest first"
    row = page.split(f'data-snapshot="{periodic.snapshot_id}"')[1].split("</tr>")[0]
    cells = [
        re.sub("<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)
    ]
    assert cells[1] == "1,234" and cells[3] == "2 h 0 min ago"
    assert cells[4] == "1,600" and cells[5] == f"{periodic.bytes:,}" and "," in cells[5]
    assert cells[6:10] == ["1.2 s", "periodic", "rescaler", "executor-0, executor-1"]
    # the age is of the page's time: a loaded machine renders it a second or two after `now`
    assert re.search(r"2 min [5-9] s ago", page) and "3.5 s" in page
    # operator-typed text is escaped
    assert "&lt;b&gt;mallory&lt;/b&gt;" in page and "<b>mallory</b>" not in page
    # the last restore: which snapshot, when, by whom, onto which PUs, keys, seconds
    restored = page.split('id="restore-title"')[1].split("</section>")[0]
    assert periodic.snapshot_id in restored and "night-shift" in restored
    assert "0, 1, 2" in restored and f"{periodic.keys // 3 * 3:,}" in restored
    assert "0.75 s" in restored
    # a viewer sees everything but the form
    assert "Snapshot now</button>" not in page and "needs the" in page


def test_an_operator_snapshots_now_and_is_redirected(location: RecoveryLocation) -> None:
    operator = _client("operator", rescale=True, csrf=True)
    page = operator.get(PAGE)
    assert "Snapshot now</button>" in page.content.decode()
    token = page.cookies["csrftoken"].value
    response = operator.post(
        PAGE, {"reason": "<script>alert(1)</script> before deploy", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and response["Location"] == PAGE
    (command,) = RunnerCommand.objects.all()
    assert command.kind == "snapshot" and command.payload == {"requested_by": "operator"}
    event = AuditEvent.objects.get(action="snapshot.requested")
    assert event.actor_name == "operator" and event.after["command"] == command.id
    shown = _text(operator.get(PAGE))
    assert f"Snapshot requested (runner command {command.id})" in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt; before deploy" in shown
    assert "<script>alert(1)" not in shown
    assert "pending" in shown.split("Recent requests")[1]


def test_the_form_needs_its_csrf_token(location: RecoveryLocation) -> None:
    operator = _client("operator", rescale=True, csrf=True)
    assert operator.post(PAGE, {"reason": "no token"}).status_code == 403
    _nothing_recorded()


@pytest.mark.parametrize(
    ("reason", "message"),
    [("", "a reason is required"), ("   ", "a reason is required"), ("x" * 501, "at most 500")],
)
def test_the_reason_is_validated_on_the_server(
    location: RecoveryLocation, reason: str, message: str
) -> None:
    response = _client("operator", rescale=True).post(PAGE, {"reason": reason})
    assert response.status_code == 400
    page = _text(response)
    field = page.split('data-field="reason"')[1].split("</div>")[0]
    assert "field-error" in field and message in field
    _nothing_recorded()


def test_a_viewer_may_not_post(location: RecoveryLocation) -> None:
    response = _client("viewer", rescale=False).post(PAGE, {"reason": "please"})
    assert response.status_code == 403
    _nothing_recorded()


def test_a_stopped_runner_is_said_and_refused(location: RecoveryLocation) -> None:
    Pipeline.objects.update(status=Pipeline.Status.STOPPED)
    operator = _client("operator", rescale=True)
    assert "is not running" in _text(operator.get(PAGE))
    response = operator.post(PAGE, {"reason": "typed <i>text</i>"})
    assert response.status_code == 409
    page = _text(response)
    assert "start it and ask again" in page
    assert "typed &lt;i&gt;text&lt;/i&gt;</textarea>" in page, "the reason is kept, escaped"
    _nothing_recorded()


def test_an_unknown_pipeline_is_404_and_no_pipeline_says_so(settings: Any, tmp_path: Path) -> None:
    settings.STATE_DIR = tmp_path / "state"
    operator = _client("operator", rescale=True)
    assert operator.get("/snapshots/").status_code == 200
    assert "No pipeline has registered yet" in _text(operator.get("/snapshots/"))
    assert operator.get("/snapshots/nope/").status_code == 404
    assert operator.post("/snapshots/nope/", {"reason": "x"}).status_code == 404
    _nothing_recorded()


def test_a_rebuild_of_lost_stores_is_shown_and_audited_once(
    location: RecoveryLocation, settings: Any
) -> None:
    viewer = _client("viewer", rescale=False)
    none = _text(viewer.get(PAGE)).split('id="rebuild-title"')[1].split("</section>")[0]
    assert "No store has been rebuilt." in none

    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=4)
    state = Path(settings.STATE_DIR)
    lost = (
        StoreState(FRAGMENT, 1, "missing", "<b>gone</b>"),
        StoreState(FRAGMENT, 2, "corrupt", "data.mdb differs <script>x</script>"),
    )
    rebuild(state, manifest, lost=lost, started_at=time.time() - 60)
    page = _text(viewer.get(PAGE))
    section = page.split('id="rebuild-title"')[1].split("</section>")[0]
    assert "No store has been rebuilt" not in section
    assert manifest.snapshot_id in section and "(epoch 4)" in section and "to epoch 7" in section
    assert "3 (5–7)" in section and "9.5 s" in section
    assert "<td>500</td>" in section, "keys refilled: 200 + 300, one task per PU"
    lost_rows = section.split('aria-label="Lost stores"')[1].split("</table>")[0]
    assert "missing" in lost_rows and "corrupt" in lost_rows
    # the store check's text is shown as text
    assert "&lt;b&gt;gone&lt;/b&gt;" in lost_rows and "<b>gone" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in lost_rows and "<script>x" not in page
    tasks = section.split('aria-label="Rebuild tasks"')[1].split("</table>")[0]
    assert "executor-1" in tasks and "host-2" in tasks, "where each task ran"
    viewer.get(PAGE)  # a second listing learns nothing new
    (event,) = AuditEvent.objects.filter(action="store.rebuilt")
    assert (event.actor_name, event.object_id) == ("runner", PIPELINE)
    assert (
        event.after["rerun_epochs"] == [5, 6, 7] and event.after["lost"][1]["status"] == "corrupt"
    )

    # gone from the state directory (another machine's): the audit still tells it
    (state / PIPELINE / "rebuilt.json").unlink()
    again = _text(viewer.get(PAGE)).split('id="rebuild-title"')[1].split("</section>")[0]
    assert manifest.snapshot_id in again and "&lt;b&gt;gone&lt;/b&gt;" in again
    # a later rebuild is a new event
    rebuild(state, manifest, lost=lost[:1])
    viewer.get(PAGE)
    assert AuditEvent.objects.filter(action="store.rebuilt").count() == 2


def test_a_restore_under_way_shows_each_task_s_progress(
    location: RecoveryLocation, settings: Any
) -> None:
    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=4)
    root = Path(settings.STATE_DIR) / PIPELINE
    begin_restore(root, manifest, location.uri)
    viewer = _client("viewer", rescale=False)
    page = _text(viewer.get(PAGE))
    assert "Restore in progress" in page and "No restore task has started yet" in page
    progress = root / RESTORE_PROGRESS
    progress.mkdir()
    half = manifest.keys // 2
    for pu, keys, done in ((0, half, True), (1, 10, False)):
        (progress / f"pu-{pu}.json").write_text(
            json.dumps({"pu": pu, "keys": keys, "keys_total": half, "done": done,
                        "executor": f"executor-{pu}", "host": "h", "updated_at": 0}),
            "utf-8",
        )  # fmt: skip
    body = viewer.get(f"/api/v1/pipelines/{PIPELINE}/snapshots").json()["restoring"]
    assert body["snapshot_id"] == manifest.snapshot_id and body["keys"] == half + 10
    assert (
        body["keys_total"] == manifest.keys
        and body["percent"] == 100 * (half + 10) // manifest.keys
    )
    assert [(t["parallel_unit"], t["done"]) for t in body["tasks"]] == [(0, True), (1, False)]
    page = _text(viewer.get(PAGE))
    assert f"{half + 10:,} of {manifest.keys:,} keys" in page
    restore(Path(settings.STATE_DIR), manifest, pus=(0, 1))  # it finishes
    assert viewer.get(f"/api/v1/pipelines/{PIPELINE}/snapshots").json()["restoring"] is None
    assert "Restore in progress" not in _text(viewer.get(PAGE))
