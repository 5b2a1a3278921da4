"""Progress from the runner: recorded on the operation and its steps, audited, published.

Called in the runner process through ``rescaler.runner.control.OrmControl``; the drive loop reads
what this records (``OrmChannel.progress``).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from rescaler.audit.services import audit_record
from rescaler.events import CLUSTER_GROUP, operation_group, publish
from rescaler.operations.models import RescaleOperation, RescaleStep
from workers.rescale.protocol import AuditObject, Event, OperationProgress, StepPhase


def operation_progress_record(*, pipeline: str, progress: dict[str, Any]) -> None:
    """Record one progress report of an operation; a step whose phase changed is audited."""
    report = OperationProgress.from_json(progress)
    operation_id = report.operation_id
    changes: list[tuple[int, str, StepPhase]] = []
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().filter(operation_id=operation_id).first()
        if op is None:  # an operation started without the control plane (python -m workers)
            publish(CLUSTER_GROUP, Event.OPERATION_PROGRESS, report.summary_json())
            return
        op.progress = report.to_json()
        op.vnodes_moved = report.vnodes_moved
        op.keys_moved = report.keys_moved
        op.bytes_moved = report.bytes_moved
        op.save(update_fields=["progress", "vnodes_moved", "keys_moved", "bytes_moved"])
        steps = {s.step: s for s in RescaleStep.objects.filter(operation=op)}
        for data in report.steps:
            step = steps.get(data.step)
            if step is None:
                continue
            if step.phase != data.phase:
                changes.append((step.step, step.phase, data.phase))
            step.phase = data.phase
            step.keys_moved = data.keys_moved
            step.bytes_moved = data.bytes_moved
            step.hold_queue = data.hold_queue
            step.collect_epoch = data.collect_epoch
            step.acquire_epoch = data.acquire_epoch
            step.drop_epoch = data.drop_epoch
            step.per_vnode = data.per_vnode
            step.timings = data.timings
            step.error = data.error
            step.save()
        for number, old, new in changes:
            step = steps[number]
            audit_record(
                actor_name="runner",
                action=f"step.{new}",
                obj=(AuditObject.STEP, f"{operation_id}/{number}"),
                before={"phase": old},
                after={
                    "phase": new,
                    "vnodes": step.vnodes,
                    "source_pu": step.source_pu,
                    "target_pu": step.target_pu,
                    "collect_epoch": step.collect_epoch,
                    "acquire_epoch": step.acquire_epoch,
                    "drop_epoch": step.drop_epoch,
                    "keys_moved": step.keys_moved,
                },
            )
    publish(operation_group(operation_id), Event.OPERATION_PROGRESS, report.to_json())
    publish(CLUSTER_GROUP, Event.OPERATION_PROGRESS, report.summary_json())
