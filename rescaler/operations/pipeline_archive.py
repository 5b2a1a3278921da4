"""Archiving a pipeline no runner reports for (an earlier run's state): it leaves the cluster
page, the rescale form and ``GET /cluster``; its rows, operations and audit trail stay. A
runner of that pipeline registering again brings it back (``topology_register``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Pipeline
from rescaler.cluster.selectors import runner_alive
from rescaler.operations.models import OperationFragment
from workers.rescale import errors
from workers.rescale.protocol import AuditObject


class PipelineArchiveRefused(errors.RescaleError):
    """A pipeline whose runner reports, or with an operation in progress, stays."""

    code = "pipeline_archive_refused"


class UnknownPipeline(errors.RescaleError):
    code = "unknown_pipeline"


@transaction.atomic
def pipeline_archive(*, user: Any, name: str, reason: str = "") -> Pipeline:
    """Archive the pipeline ``name``; an archived one is left as it is (nothing recorded)."""
    pipeline = Pipeline.objects.locked().filter(name=name).first()
    if pipeline is None:
        raise UnknownPipeline(f"no pipeline named {name!r} has registered")
    if pipeline.archived_at is not None:
        return pipeline
    if runner_alive(pipeline):
        raise PipelineArchiveRefused(
            f"pipeline {name!r} is running (its runner reports): stop its runner first"
        )
    busy = (
        OperationFragment.objects.filter(active=True, fragment__pipeline=pipeline)
        .values_list("operation__operation_id", flat=True)
        .first()
    )
    if busy is not None:
        raise PipelineArchiveRefused(
            f"pipeline {name!r} has operation {busy} in progress: let it end or cancel it first"
        )
    pipeline.archived_at = timezone.now()
    pipeline.save(update_fields=["archived_at"])
    audit_record(
        actor=user,
        action="pipeline.archived",
        obj=(AuditObject.PIPELINE, name),
        before={"archived": False},
        after={"archived": True, "reason": reason},
    )
    return pipeline
