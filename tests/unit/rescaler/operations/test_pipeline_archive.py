"""Archiving an earlier run's pipeline (``rescaler.operations.pipeline_archive``): refused while its runner
reports or an operation holds it, audited once, left out of GET /cluster, and brought back by
its runner registering again."""

from __future__ import annotations

from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Pipeline
from rescaler.operations.pipeline_archive import (
    PipelineArchiveRefused,
    UnknownPipeline,
    pipeline_archive,
)
from tests.unit.api.fixtures import (
    PIPELINE,
    make_user,
    register_cluster,
    register_earlier_run,
    token_client,
)
from workers.control import Topology

pytestmark = pytest.mark.django_db


def _names(client: Any) -> set[str]:
    body = client.get("/api/v1/cluster").json()
    return {p["name"] for p in body["pipelines"]} | {f["pipeline"] for f in body["fragments"]}


def test_an_earlier_run_is_archived_once_audited_and_left_out_of_the_cluster() -> None:
    register_cluster()
    register_earlier_run("earlier", "old_counts")
    user = make_user("operator", rescale=True)
    client = token_client(user)
    assert _names(client) == {PIPELINE, "earlier"}
    pipeline_archive(user=user, name="earlier", reason="an old run")
    pipeline_archive(user=user, name="earlier")  # again: nothing more
    events = AuditEvent.objects.filter(action="pipeline.archived")
    assert events.count() == 1 and events.get().object_id == "earlier"
    assert _names(client) == {PIPELINE}
    # asked by name, it is still there
    assert client.get("/api/v1/cluster?pipeline=earlier").status_code == 200


def test_a_running_pipeline_or_one_an_operation_holds_is_not_archived() -> None:
    register_cluster()
    user = make_user("operator", rescale=True)
    with pytest.raises(PipelineArchiveRefused, match="is running"):
        pipeline_archive(user=user, name=PIPELINE)
    with pytest.raises(UnknownPipeline):
        pipeline_archive(user=user, name="nope")
    earlier = register_earlier_run("earlier", "old_counts")
    from rescaler.operations.models import OperationFragment, RescaleOperation

    op = RescaleOperation.objects.create(pipeline=earlier, changes={}, plan={}, fragments=[])
    OperationFragment.objects.create(operation=op, fragment=earlier.fragments.get())
    with pytest.raises(PipelineArchiveRefused, match="in progress"):
        pipeline_archive(user=user, name="earlier")
    assert Pipeline.objects.get(name="earlier").archived_at is None
    assert not AuditEvent.objects.filter(action="pipeline.archived").exists()


def test_its_runner_registering_again_brings_it_back() -> None:
    earlier = register_earlier_run("earlier", "old_counts")
    pipeline_archive(user=make_user("operator", rescale=True), name="earlier")
    cluster_services.topology_register(
        topology=Topology(pipeline="earlier", workers={"local-0": [0]}, fragments={}, spark={})
    )
    earlier.refresh_from_db()
    assert earlier.archived_at is None
