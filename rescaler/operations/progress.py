"""Progress from the runner: recorded on the operation and its steps, audited, published.

Called in the runner process through ``rescaler.cluster.control.OrmControl``; the drive loop reads
what this records (``OrmChannel.progress``).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from rescaler.events import publish
from rescaler.operations.audit import audit_record
from rescaler.operations.models import RescaleOperation, RescaleStep


def operation_progress_record(*, pipeline: str, progress: dict[str, Any]) -> None:
    """Record one progress report of an operation; a step whose phase changed is audited."""
    uid = progress["operation"]
    changes: list[tuple[int, str, str]] = []
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().filter(uid=uid).first()
        if op is None:  # an operation started without the control plane (python -m workers)
            publish(
                "cluster", "rescale.progress", {k: v for k, v in progress.items() if k != "steps"}
            )
            return
        op.progress = progress
        op.vnodes_moved = progress.get("vnodes_moved", 0)
        op.keys_moved = progress.get("keys_moved", 0)
        op.bytes_moved = progress.get("bytes_moved", 0)
        op.save(update_fields=["progress", "vnodes_moved", "keys_moved", "bytes_moved"])
        steps = {s.number: s for s in RescaleStep.objects.filter(operation=op)}
        for data in progress.get("steps", []):
            step = steps.get(data["step"])
            if step is None:
                continue
            if step.phase != data["phase"]:
                changes.append((step.number, step.phase, data["phase"]))
            step.phase = data["phase"]
            step.keys_moved = data.get("keys_moved", 0)
            step.bytes_moved = data.get("bytes_moved", 0)
            step.hold_queue = data.get("hold_queue", 0)
            step.collect_epoch = data.get("collect_epoch")
            step.acquire_epoch = data.get("acquire_epoch")
            step.drop_epoch = data.get("drop_epoch")
            step.per_vnode = data.get("per_vnode", {})
            step.timings = data.get("timings", {})
            step.error = data.get("error", "")
            step.save()
        for number, old, new in changes:
            step = steps[number]
            audit_record(
                actor_name="runner",
                action=f"step.{new}",
                obj=("rescale_step", f"{uid}/{number}"),
                before={"phase": old},
                after={
                    "phase": new,
                    "vnodes": step.vnodes,
                    "source": step.source_pu,
                    "target": step.target_pu,
                    "collect_epoch": step.collect_epoch,
                    "acquire_epoch": step.acquire_epoch,
                    "drop_epoch": step.drop_epoch,
                    "keys_moved": step.keys_moved,
                },
            )
    publish(f"operation_{uid}", "rescale.progress", progress)
    publish("cluster", "rescale.progress", {k: v for k, v in progress.items() if k != "steps"})
