"""Restores and rebuilds of lost stores without HTTP: each audited once, from what the runner's
own writers leave in the state directory, else read back from the audit; an unreadable record
is logged and ignored."""

from __future__ import annotations

import datetime as dt
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.cluster import restores, snapshots
from rescaler.cluster.snapshot_records import LostStoreRecord, RebuildRecord
from tests.unit.api.fixtures import PIPELINE, register_cluster
from tests.unit.api.snapshot_fixtures import FRAGMENT, rebuild, restore, take_snapshot
from workers.recovery.location import RecoveryLocation
from workers.recovery.stores import StoreState


@pytest.mark.django_db
def test_restore_learn_records_each_restore_once(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.STATE_DIR = tmp_path / "state"
    settings.RESCALER_RECOVERY_DIR = str(tmp_path / "recovery")
    location = RecoveryLocation(tmp_path / "recovery")
    manifest = take_snapshot(location, pipeline=PIPELINE, epoch=2)
    monkeypatch.setenv("RESCALER_ACTOR", "ci-job")
    restore(tmp_path / "state", manifest)
    assert restores.restore_learn(pipeline=PIPELINE) is None, "no such pipeline registered"
    register_cluster()
    first = restores.restore_learn(pipeline=PIPELINE)
    assert first is not None and first.actor_name == "ci-job"
    assert restores.restore_learn(pipeline=PIPELINE) is None
    overview = snapshots.snapshot_overview(pipeline=PIPELINE)
    assert overview.last_restore is not None
    assert overview.last_restore.snapshot_id == manifest.snapshot_id
    assert overview.last_restore.parallel_units == (0, 1, 2)
    assert AuditEvent.objects.filter(action="snapshot.restored").count() == 1


# -- rebuilds of lost stores ---------------------------------------------------------------------
LOST = (
    StoreState(FRAGMENT, 1, "missing", "stores/word_count/pu-1 is gone"),
    StoreState(FRAGMENT, 3, "behind", "applied epoch 2, not 7 or 8", applied_epoch=2),
)


@pytest.fixture
def state(settings: Any, tmp_path: Path) -> Path:
    settings.STATE_DIR = tmp_path / "state"
    settings.RESCALER_RECOVERY_DIR = str(tmp_path / "recovery")
    return tmp_path / "state"


def test_rebuild_read_reads_what_the_runner_wrote(state: Path, tmp_path: Path) -> None:
    assert restores.rebuild_read(pipeline=PIPELINE) is None, "no rebuild: nothing to read"
    manifest = take_snapshot(RecoveryLocation(tmp_path / "recovery"), pipeline=PIPELINE, epoch=4)
    written = rebuild(state, manifest, lost=LOST, started_at=1_800_000_000.25)
    assert restores.rebuild_read(pipeline=PIPELINE) == written
    elsewhere = tmp_path / "runner-state"
    assert restores.rebuild_read(pipeline=PIPELINE, state_dir=elsewhere) is None

    record = RebuildRecord.from_json(written)
    assert (record.snapshot_id, record.snapshot_epoch, record.epoch) == (
        manifest.snapshot_id,
        4,
        7,
    )
    assert record.rebuilt_at == dt.datetime.fromtimestamp(1_800_000_000.25, dt.UTC)
    assert record.rerun_epochs == (5, 6, 7) and record.seconds == 9.5
    assert record.lost == (
        LostStoreRecord(FRAGMENT, 1, "missing", "stores/word_count/pu-1 is gone"),
        LostStoreRecord(FRAGMENT, 3, "behind", "applied epoch 2, not 7 or 8"),
    )
    assert [(t.parallel_unit, t.executor, t.host) for t in record.tasks] == [
        (1, "executor-1", "host-1"),
        (3, "executor-3", "host-3"),
    ]
    assert record.keys == sum(t.keys for t in record.tasks) == 600
    # what the audit keeps reads back as the same record
    assert RebuildRecord.from_json(record.to_json()) == record


@pytest.mark.django_db
def test_rebuild_learn_records_each_rebuild_once(state: Path, tmp_path: Path) -> None:
    manifest = take_snapshot(RecoveryLocation(tmp_path / "recovery"), pipeline=PIPELINE, epoch=4)
    first_at = time.time() - 600
    rebuild(state, manifest, lost=LOST, started_at=first_at)
    assert restores.rebuild_learn(pipeline=PIPELINE) is None, "no such pipeline registered"
    assert not AuditEvent.objects.exists()
    register_cluster()

    event = restores.rebuild_learn(pipeline=PIPELINE)
    assert event is not None
    assert (event.action, event.actor, event.actor_name) == ("store.rebuilt", None, "runner")
    assert (event.object_type, event.object_id) == ("pipeline", PIPELINE)
    after = event.after
    assert after["pipeline"] == PIPELINE and after["started_at"] == first_at
    assert (after["snapshot_id"], after["snapshot_epoch"], after["epoch"]) == (
        manifest.snapshot_id,
        4,
        7,
    )
    assert after["rerun_epochs"] == [5, 6, 7] and after["keys"] == 600
    assert after["duration_s"] == 9.5
    assert [(s["pu"], s["status"], s["detail"]) for s in after["lost"]] == [
        (1, "missing", "stores/word_count/pu-1 is gone"),
        (3, "behind", "applied epoch 2, not 7 or 8"),
    ]
    assert [t["host"] for t in after["tasks"]] == ["host-1", "host-3"]

    assert restores.rebuild_learn(pipeline=PIPELINE) is None, "the same rebuild: nothing"
    snapshots.snapshot_overview(pipeline=PIPELINE)  # a listing learns nothing new either
    assert AuditEvent.objects.filter(action="store.rebuilt").count() == 1

    # a newer rebuild is recorded, once; an older rebuilt.json put back is not
    rebuild(state, manifest, lost=LOST[:1], started_at=first_at + 300)
    second = restores.rebuild_learn(pipeline=PIPELINE)
    assert second is not None and second.after["started_at"] == first_at + 300
    assert restores.rebuild_learn(pipeline=PIPELINE) is None
    rebuild(state, manifest, lost=LOST, started_at=first_at + 100)
    assert restores.rebuild_learn(pipeline=PIPELINE) is None
    assert AuditEvent.objects.filter(action="store.rebuilt").count() == 2
    # nothing of it is a restore
    assert not AuditEvent.objects.filter(action="snapshot.restored").exists()


@pytest.mark.django_db
def test_the_last_rebuild_is_read_from_the_audit_when_the_state_is_elsewhere(
    state: Path, tmp_path: Path
) -> None:
    """The runner registered from another state directory than this process's STATE_DIR."""
    register_cluster()
    assert snapshots.snapshot_overview(pipeline=PIPELINE).last_rebuild is None
    manifest = take_snapshot(RecoveryLocation(tmp_path / "recovery"), pipeline=PIPELINE, epoch=4)
    written = rebuild(tmp_path / "runner-state", manifest, lost=LOST)
    assert restores.rebuild_learn(pipeline=PIPELINE) is None, "not in this STATE_DIR"
    assert restores.rebuild_learn(pipeline=PIPELINE, state_dir=tmp_path / "runner-state")
    shown = snapshots.snapshot_overview(pipeline=PIPELINE).last_rebuild
    assert shown == RebuildRecord.from_json(written)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content",
    [
        b'{"snapshot_id": "s2026',  # half written
        b"[1, 2]",  # not an object
        b'{"snapshot_id": "s", "epoch": 7}',  # fields missing
        b'{"snapshot_id": "s", "snapshot_epoch": 4, "epoch": "seven", "started_at": 1}',
        b"\xff\xfe",  # not UTF-8
        None,  # a directory where the file should be
    ],
)
def test_an_unreadable_rebuild_record_is_logged_and_ignored(
    state: Path, content: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    register_cluster()
    path = state / PIPELINE / "rebuilt.json"
    path.parent.mkdir(parents=True)
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="rescaler.cluster.restores"):
        assert restores.rebuild_read(pipeline=PIPELINE) is None
        assert restores.rebuild_learn(pipeline=PIPELINE) is None
        assert snapshots.snapshot_overview(pipeline=PIPELINE).last_rebuild is None
    assert f"cannot read {path}" in caplog.text
    assert not AuditEvent.objects.filter(action="store.rebuilt").exists()
