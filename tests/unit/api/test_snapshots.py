"""``/api/v1/pipelines/<name>/snapshots``: the listing reads what the runner's own writers left in
a recovery location (tests/unit/api/snapshot_fixtures.py), "Snapshot now" queues exactly one
audited ``snapshot`` command, refusals change nothing, and a restore or a rebuild of lost stores
is audited once."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline, RunnerCommand
from rescaler.cluster.snapshots import recovery_location
from rescaler.runner import control
from rescaler.runner.control import OrmControl
from tests.unit.api.fixtures import PIPELINE, make_user, token_client
from tests.unit.api.snapshot_fixtures import FRAGMENT, VNODES, rebuild, restore, take_snapshot
from workers.control import Topology
from workers.recovery.location import RecoveryLocation
from workers.recovery.stores import StoreState

pytestmark = pytest.mark.django_db

URL = f"/api/v1/pipelines/{PIPELINE}/snapshots"


@pytest.fixture(autouse=True)
def _keep_the_test_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """OrmControl refreshes old connections first: in a test that would close the test's own."""
    monkeypatch.setattr(control, "close_old_connections", lambda: None)


@pytest.fixture
def location(settings: Any, tmp_path: Path) -> RecoveryLocation:
    """The default location: ``recovery`` beside the tests' STATE_DIR, as the runner has it."""
    settings.RESCALER_RECOVERY_DIR = ""
    return RecoveryLocation(tmp_path / "recovery")


def _post(client: APIClient, body: Any, pipeline: str = PIPELINE) -> Any:
    return client.post(f"/api/v1/pipelines/{pipeline}/snapshots", body, format="json")


def _nothing_recorded() -> None:
    assert not RunnerCommand.objects.filter(kind="snapshot").exists()
    assert not AuditEvent.objects.filter(action__startswith="snapshot.").exists()


# -- the location --------------------------------------------------------------------------------
def test_the_location_is_the_runners(settings: Any, tmp_path: Path) -> None:
    settings.RESCALER_RECOVERY_DIR = ""
    assert recovery_location().uri == str(tmp_path / "recovery")
    settings.RESCALER_RECOVERY_DIR = str(tmp_path / "elsewhere")
    assert recovery_location().uri == str(tmp_path / "elsewhere")


# -- GET -----------------------------------------------------------------------------------------
def test_lists_the_snapshots_newest_first_with_their_figures(
    cluster: Pipeline, location: RecoveryLocation, viewer_client: APIClient
) -> None:
    now = time.time()
    old = take_snapshot(location, pipeline=PIPELINE, epoch=5, taken_at=now - 3600)
    new = take_snapshot(
        location,
        pipeline=PIPELINE,
        epoch=9,
        taken_at=now - 60,
        keys_per_vnode=4,
        pus=(0, 1, 2),
        trigger="manual",
        requested_by="alice",
        duration_s=2.5,
    )
    take_snapshot(location, pipeline="another", epoch=1)  # not this pipeline's
    response = viewer_client.get(URL)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["pipeline"] == PIPELINE and body["runner_alive"] is True
    assert body["location"] == location.uri and body["problems"] == []
    assert [s["snapshot_id"] for s in body["snapshots"]] == [new.snapshot_id, old.snapshot_id]
    first = body["snapshots"][0]
    assert first["epoch"] == 9 and first["trigger"] == "manual"
    assert first["requested_by"] == "alice" and first["duration_s"] == 2.5
    assert first["keys"] == VNODES * 4 == new.keys and first["bytes"] == new.bytes > 0
    assert first["executors"] == ["executor-0", "executor-1", "executor-2"]
    assert first["fragments"] == ["word_count"] and first["partitions"] == 4
    assert 59 <= first["age_s"] < 120
    taken = dt.datetime.fromisoformat(first["taken_at"].replace("Z", "+00:00"))
    assert abs(taken.timestamp() - (now - 60)) < 0.01
    assert body["snapshots"][1]["trigger"] == "periodic" and body["snapshots"][1]["keys"] == 48
    assert body["last_restore"] is None and body["requests"] == []
    assert body["last_rebuild"] is None


def test_an_empty_location_lists_nothing(
    cluster: Pipeline, location: RecoveryLocation, viewer_client: APIClient
) -> None:
    assert not Path(location.uri).exists()
    body = viewer_client.get(URL).json()
    assert body["snapshots"] == [] and body["problems"] == [] and body["last_restore"] is None


def test_an_incomplete_or_unreadable_snapshot_is_left_out_and_named(
    cluster: Pipeline, location: RecoveryLocation, viewer_client: APIClient
) -> None:
    good = take_snapshot(location, pipeline=PIPELINE, epoch=3, taken_at=time.time() - 100)
    # a snapshot whose writing stopped before its manifest does not exist
    location.write_bytes(f"{PIPELINE}/s20990101T000000000Z-e8/word_count/part-000/pu-0.arrow", b"x")
    # a manifest that is not JSON is named, and the others still listed
    location.write_bytes(f"{PIPELINE}/s20990101T000000000Z-e9/manifest.json", b"{not json")
    body = viewer_client.get(URL).json()
    assert [s["snapshot_id"] for s in body["snapshots"]] == [good.snapshot_id]
    (problem,) = body["problems"]
    assert "s20990101T000000000Z-e9" in problem and "not JSON" in problem


@pytest.mark.parametrize("method", ["get", "post"])
def test_an_unknown_pipeline_is_404_with_the_reason(
    cluster: Pipeline, location: RecoveryLocation, operator_client: APIClient, method: str
) -> None:
    url = "/api/v1/pipelines/nope/snapshots"
    response = (
        operator_client.get(url)
        if method == "get"
        else operator_client.post(url, {"reason": "why not"}, format="json")
    )
    assert response.status_code == 404
    assert response.json() == {
        "code": "unknown_pipeline",
        "detail": "no pipeline named 'nope' has registered",
    }
    _nothing_recorded()


# -- POST ----------------------------------------------------------------------------------------
def test_snapshot_now_queues_one_audited_snapshot_command(
    cluster: Pipeline, location: RecoveryLocation, operator: Any, operator_client: APIClient
) -> None:
    response = _post(operator_client, {"reason": "  before the 14:00 deploy "})
    assert response.status_code == 202, response.content
    (command,) = RunnerCommand.objects.all()
    assert response.json() == {
        "command": command.id,
        "pipeline": PIPELINE,
        "status": "pending",
        "requested_by": "operator",
        "reason": "before the 14:00 deploy",
    }
    assert command.kind == "snapshot" and command.payload == {"requested_by": "operator"}
    assert command.created_by == operator and command.pipeline == cluster
    (event,) = AuditEvent.objects.all()
    assert (event.action, event.actor, event.actor_name) == (
        "snapshot.requested",
        operator,
        "operator",
    )
    assert (event.object_type, event.object_id) == ("pipeline", PIPELINE)
    assert event.after == {
        "pipeline": PIPELINE,
        "reason": "before the 14:00 deploy",
        "command": command.id,
    }
    # the runner reads it as any other command, and its answer shows in the listing
    (polled,) = OrmControl().poll_commands(PIPELINE)
    assert (polled.id, polled.kind, polled.payload) == (
        command.id,
        "snapshot",
        {"requested_by": "operator"},
    )
    OrmControl().ack_command(command.id, "done", "snapshot at the barrier of epoch 12")
    (request,) = operator_client.get(URL).json()["requests"]
    assert request["command"] == command.id and request["requested_by"] == "operator"
    assert request["status"] == "done" and request["detail"].startswith("snapshot at")
    assert request["reason"] == "before the 14:00 deploy"


@pytest.mark.parametrize(("who", "status", "code"), [
    ("anonymous", 401, "not_authenticated"), ("viewer", 403, "permission_denied"),
])  # fmt: skip
def test_snapshot_now_needs_the_rescale_permission(
    cluster: Pipeline, location: RecoveryLocation, who: str, status: int, code: str
) -> None:
    client = token_client(None if who == "anonymous" else make_user(who))
    response = _post(client, {"reason": "please"})
    assert response.status_code == status
    assert response.json()["code"] == code
    if who == "viewer":
        assert "operations.rescale" in response.json()["detail"]
        assert client.get(URL).status_code == 200, "reading needs only a login"
    _nothing_recorded()


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "x" * 501},
        {"reason": "a\x07b"},
        {"reason": 5},
    ],
    ids=["missing", "empty", "blank", "too-long", "control-character", "not-text"],
)
def test_a_reason_is_required_and_refused_with_its_field(
    cluster: Pipeline, location: RecoveryLocation, operator_client: APIClient, body: Any
) -> None:
    response = _post(operator_client, body)
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "invalid_parameters"
    assert list(error["errors"]) == ["reason"] and error["detail"].startswith("reason: ")
    _nothing_recorded()


@pytest.mark.parametrize(
    "body", [["reason"], {"reason": "ok", "force": True}], ids=["not-an-object", "unknown-field"]
)
def test_a_malformed_body_is_refused(
    cluster: Pipeline, location: RecoveryLocation, operator_client: APIClient, body: Any
) -> None:
    response = _post(operator_client, body)
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"
    _nothing_recorded()


@pytest.mark.parametrize("how", ["stale heartbeat", "stopped", "never beat"])
def test_snapshot_now_is_409_when_the_runner_is_down(
    cluster: Pipeline, location: RecoveryLocation, operator_client: APIClient, how: str
) -> None:
    if how == "stale heartbeat":
        Pipeline.objects.filter(pk=cluster.pk).update(
            heartbeat_at=timezone.now() - dt.timedelta(minutes=5)
        )
    elif how == "stopped":
        Pipeline.objects.filter(pk=cluster.pk).update(status=Pipeline.Status.STOPPED)
    else:
        Pipeline.objects.filter(pk=cluster.pk).update(heartbeat_at=None)
    response = _post(operator_client, {"reason": "now please"})
    assert response.status_code == 409
    error = response.json()
    assert error["code"] == "runner_down" and "not running" in error["detail"]
    assert operator_client.get(URL).json()["runner_alive"] is False
    _nothing_recorded()


# -- restores ------------------------------------------------------------------------------------
def _topology() -> Topology:
    return Topology(pipeline=PIPELINE, workers={"local-0": [0, 1, 2, 3]}, fragments={}, spark={})


def test_a_restore_is_audited_once_with_who_restored_it(
    cluster: Pipeline,
    location: RecoveryLocation,
    settings: Any,
    viewer_client: APIClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=7)
    monkeypatch.setenv("RESCALER_ACTOR", "night-shift")
    runs = restore(Path(settings.STATE_DIR), manifest, pus=(0, 1, 2))

    control = OrmControl(state_dir=Path(settings.STATE_DIR))
    control.register(_topology())  # the restored runner registers, as on every start
    control.register(_topology())  # and again when its placements change
    body = viewer_client.get(URL).json()  # and a listing learns nothing new
    (event,) = AuditEvent.objects.filter(action="snapshot.restored")
    assert (event.actor, event.actor_name) == (None, "night-shift")
    assert (event.object_type, event.object_id) == ("pipeline", PIPELINE)
    assert event.after["snapshot_id"] == manifest.snapshot_id and event.after["epoch"] == 7
    assert event.after["parallel_units"] == [0, 1, 2]
    assert event.after["keys"] == sum(r.keys for r in runs)

    last = body["last_restore"]
    assert last["snapshot_id"] == manifest.snapshot_id and last["restored_by"] == "night-shift"
    assert last["parallel_units"] == [0, 1, 2] and last["keys"] == sum(r.keys for r in runs)
    assert last["bytes"] == sum(r.bytes for r in runs) and last["seconds"] == 0.75
    assert [t["parallel_unit"] for t in last["tasks"]] == [0, 1, 2]
    assert last["tasks"][2] == {
        "parallel_unit": 2, "executor": "executor-2", "host": "host-2",
        "keys": runs[2].keys, "bytes": runs[2].bytes, "seconds": 0.75,
    }  # fmt: skip

    # a later restore is a new event, recorded once too
    monkeypatch.setenv("RESCALER_ACTOR", "bob")
    restore(Path(settings.STATE_DIR), manifest, pus=(0,))
    viewer_client.get(URL)
    control.register(_topology())
    events = list(AuditEvent.objects.filter(action="snapshot.restored").order_by("id"))
    assert [e.actor_name for e in events] == ["night-shift", "bob"]
    assert events[1].after["parallel_units"] == [0]


def test_the_last_restore_comes_from_the_audit_when_the_state_is_elsewhere(
    cluster: Pipeline,
    location: RecoveryLocation,
    settings: Any,
    tmp_path: Path,
    viewer_client: APIClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner registered from another state directory than this process's STATE_DIR."""
    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=4)
    monkeypatch.setenv("RESCALER_ACTOR", "carol")
    restore(tmp_path / "runner-state", manifest, pus=(1, 2))
    OrmControl(state_dir=tmp_path / "runner-state").register(_topology())
    last = viewer_client.get(URL).json()["last_restore"]
    assert last["snapshot_id"] == manifest.snapshot_id and last["restored_by"] == "carol"
    assert last["parallel_units"] == [1, 2] and len(last["tasks"]) == 2
    assert AuditEvent.objects.filter(action="snapshot.restored").count() == 1


def test_a_half_written_restore_record_is_ignored(
    cluster: Pipeline, location: RecoveryLocation, settings: Any, viewer_client: APIClient
) -> None:
    path = Path(settings.STATE_DIR) / PIPELINE / "restored.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"snapshot_id": "s', "utf-8")
    OrmControl(state_dir=Path(settings.STATE_DIR)).register(_topology())
    assert viewer_client.get(URL).json()["last_restore"] is None
    assert not AuditEvent.objects.filter(action="snapshot.restored").exists()


# -- rebuilds of lost stores ---------------------------------------------------------------------
def test_a_rebuild_is_audited_once_and_listed(
    cluster: Pipeline, location: RecoveryLocation, settings: Any, viewer_client: APIClient
) -> None:
    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=40)
    lost = (
        StoreState(FRAGMENT, 0, "corrupt", "data.mdb differs from its checksum"),
        StoreState(FRAGMENT, 2, "missing", "stores/word_count/pu-2 is gone"),
    )
    written = rebuild(Path(settings.STATE_DIR), manifest, lost=lost, epoch=42)

    control = OrmControl(state_dir=Path(settings.STATE_DIR))
    control.register(_topology())  # the runner registers after the rebuild, as on every start
    control.register(_topology())
    body = viewer_client.get(URL).json()  # and a listing learns nothing new
    (event,) = AuditEvent.objects.filter(action="store.rebuilt")
    assert (event.actor, event.actor_name, event.object_id) == (None, "runner", PIPELINE)
    assert event.after["started_at"] == written["started_at"]

    last = body["last_rebuild"]
    rebuilt_at = dt.datetime.fromisoformat(last.pop("rebuilt_at").replace("Z", "+00:00"))
    assert abs(rebuilt_at.timestamp() - written["started_at"]) < 1e-3
    assert last == {
        "snapshot_id": manifest.snapshot_id, "snapshot_epoch": 40, "epoch": 42,
        "rerun_epochs": [41, 42],
        "lost": [
            {"fragment": FRAGMENT, "parallel_unit": 0, "status": "corrupt",
             "detail": "data.mdb differs from its checksum"},
            {"fragment": FRAGMENT, "parallel_unit": 2, "status": "missing",
             "detail": "stores/word_count/pu-2 is gone"},
        ],
        "keys": 400, "seconds": 9.5,
        "tasks": [
            {"parallel_unit": 0, "executor": "executor-0", "host": "host-0", "keys": 100,
             "bytes": 2000, "seconds": 0.4},
            {"parallel_unit": 2, "executor": "executor-2", "host": "host-2", "keys": 300,
             "bytes": 2000, "seconds": 0.4},
        ],
    }  # fmt: skip
    # a restore is not a rebuild, nor the other way round
    assert body["last_restore"] is None
    assert not AuditEvent.objects.filter(action="snapshot.restored").exists()


def test_the_last_rebuild_comes_from_the_audit_when_the_state_is_elsewhere(
    cluster: Pipeline, location: RecoveryLocation, tmp_path: Path, viewer_client: APIClient
) -> None:
    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=4)
    rebuild(tmp_path / "runner-state", manifest)
    OrmControl(state_dir=tmp_path / "runner-state").register(_topology())
    last = viewer_client.get(URL).json()["last_rebuild"]
    assert last["snapshot_id"] == manifest.snapshot_id and last["rerun_epochs"] == [5, 6, 7]
    assert [(s["parallel_unit"], s["status"]) for s in last["lost"]] == [(1, "missing")]
    assert AuditEvent.objects.filter(action="store.rebuilt").count() == 1


def test_a_half_written_rebuild_record_is_ignored(
    cluster: Pipeline, location: RecoveryLocation, settings: Any, viewer_client: APIClient
) -> None:
    path = Path(settings.STATE_DIR) / PIPELINE / "rebuilt.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"snapshot_id": "s', "utf-8")
    OrmControl(state_dir=Path(settings.STATE_DIR)).register(_topology())
    assert viewer_client.get(URL).json()["last_rebuild"] is None
    assert not AuditEvent.objects.filter(action="store.rebuilt").exists()
