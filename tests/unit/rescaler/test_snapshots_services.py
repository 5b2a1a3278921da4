"""The snapshot services without HTTP: what the listing makes of what the runner writes, the
location as pages show it, and the reason's rule (restores and rebuilds: test_restores.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.cluster import snapshots
from rescaler.cluster.models import Pipeline, RunnerCommand
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster
from tests.unit.workers.recovery.snapshot_setup import take
from workers.pipeline.placement import VnodeMapping
from workers.recovery.location import RecoveryLocation
from workers.rescale import errors


def test_a_snapshot_the_runners_own_code_wrote_is_listed(tmp_path: Path) -> None:
    """The write job of ``workers.recovery.snapshots.Snapshots`` (its tasks run in this
    process), then the listing: every figure comes from that manifest."""
    mapping = VnodeMapping.initial("counts", 64, [0, 1])
    _, entries, sid = take(tmp_path, "lmdb", mapping, epoch=7, keys=500)
    records, problems = snapshots.snapshot_list(
        pipeline="p", location=RecoveryLocation(tmp_path / "recovery")
    )
    (record,) = records
    assert problems == []
    assert (record.snapshot_id, record.epoch, record.keys) == (sid, 7, len(entries))
    assert record.trigger == "periodic" and record.requested_by == "rescaler"
    assert record.partitions == 8 and record.fragments == ("counts",)
    assert record.bytes == sum(len(k) + len(v) for k, v in entries.items())
    assert len(record.executors) == 1 and record.age_s >= 0


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("/var/lib/rescaler/recovery", "/var/lib/rescaler/recovery"),
        ("s3://bucket/prefix", "s3://bucket/prefix"),
        ("s3://KEY:SECRET@bucket/prefix?endpoint_override=minio:9000", "s3://bucket/prefix"),
        ("gs://b/p?access_token=t", "gs://b/p"),
    ],
)
def test_a_location_is_shown_without_credentials(uri: str, shown: str) -> None:
    assert snapshots.location_shown(uri) == shown


@pytest.mark.parametrize("reason", ["", "   ", "\n\t"])
def test_a_reason_is_required(reason: str) -> None:
    with pytest.raises(snapshots.ReasonRequired, match="a reason is required"):
        snapshots.reason_clean(reason)


def test_a_reason_follows_the_rule_of_every_reason() -> None:
    assert snapshots.reason_clean("  why\tnot\n ") == "why\tnot"
    for bad in ("x" * 501, "bell\x07", None, 3):
        with pytest.raises(errors.MalformedRequest):
            snapshots.reason_clean(bad)


@pytest.mark.django_db
def test_snapshot_request_checks_before_it_writes(settings: Any, tmp_path: Path) -> None:
    settings.STATE_DIR = tmp_path / "state"
    user = make_user("ops", rescale=True)
    with pytest.raises(snapshots.UnknownPipeline):
        snapshots.snapshot_request(user=user, pipeline=PIPELINE, reason="first")
    register_cluster()
    with pytest.raises(snapshots.ReasonRequired):
        snapshots.snapshot_request(user=user, pipeline=PIPELINE, reason=" ")
    Pipeline.objects.update(status=Pipeline.Status.STOPPING)
    with pytest.raises(snapshots.RunnerDown, match="not running"):
        snapshots.snapshot_request(user=user, pipeline=PIPELINE, reason="now")
    assert not RunnerCommand.objects.exists() and not AuditEvent.objects.exists()
    Pipeline.objects.update(status=Pipeline.Status.RUNNING)
    command = snapshots.snapshot_request(user=user, pipeline=PIPELINE, reason="now")
    assert command.kind == "snapshot" and command.status == "pending"
    assert AuditEvent.objects.get().after["command"] == command.id
