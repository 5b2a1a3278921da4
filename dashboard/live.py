"""The operation page's live feed: each progress report becomes one delta event.

``operation.progress`` on an operation's group (``/ws/operations/<operation_id>/``) carries the
operation's ``progress_version`` (one more than the event before) and only what changed since
that event, in the shapes of the operation document (``GET /api/v1/operations/<id>``, which
carries the version too): ``operation``, the document's own fields that changed (the columns
the report changed, and ``moved``, ``waiting`` and ``steps_done`` each time); ``steps``, the
rows whose figures changed; ``vnodes``, those steps' vnodes; ``events``, the audit events
appended. A page applies it when it holds the version before, and re-reads the document
otherwise. docs/api.md, "Websocket events", has the shapes.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, prefetch_related_objects
from django.dispatch import receiver

from dashboard.api import selectors
from dashboard.api.serializers import (
    AuditEventSerializer,
    OperationDetailSerializer,
    OperationVnodeSerializer,
    StepSerializer,
)
from rescaler import events as channel
from rescaler.audit.models import AuditEvent
from rescaler.events import operation_group
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.signals import operation_progressed
from workers.rescale.protocol import Event, StepPhase

# the document's fields worked out from every step, sent with each delta (their size does not
# grow with the steps)
DERIVED = ("moved", "waiting", "steps_done")
# what ``moved`` and ``waiting`` read of every step
STEP_FIGURES = ("operation", "step", "phase", "vnodes", "timings", "keys", "bytes")


def operation_delta(
    *,
    operation: RescaleOperation,
    version: int,
    columns: list[str],
    steps: list[RescaleStep],
    events: list[AuditEvent],
) -> dict[str, Any]:
    """The delta event of one progress report (see the module's docstring)."""
    every = RescaleStep.objects.only(*STEP_FIGURES, "keys_moved", "bytes_moved")
    prefetch_related_objects([operation], Prefetch("steps", queryset=every))
    operation.steps_done = sum(  # type: ignore[attr-defined]  # as the document's annotation
        1 for s in operation.steps.all() if s.phase == StepPhase.DONE
    )
    fields = OperationDetailSerializer(operation).fields
    changed = {}
    for name in [*columns, *DERIVED]:
        field = fields[name]
        changed[name] = field.to_representation(field.get_attribute(operation))
    vnodes: list[Any] = []
    if steps:
        # the document's vnode rows, of the changed steps only
        only = RescaleOperation(pk=operation.pk)
        prefetch_related_objects(
            [only],
            Prefetch("steps", queryset=RescaleStep.objects.filter(pk__in=[s.pk for s in steps])),
        )
        vnodes = list(
            OperationVnodeSerializer(selectors.operation_vnodes(operation=only), many=True).data
        )
    return {
        "operation_id": operation.operation_id,
        "progress_version": version,
        "operation": changed,
        "steps": list(StepSerializer(steps, many=True).data),
        "vnodes": vnodes,
        "events": list(AuditEventSerializer(events, many=True).data),
    }


@receiver(operation_progressed, dispatch_uid="dashboard.operation_progress_published")
def operation_progress_publish(sender: Any, **report: Any) -> None:
    """Publish a progress report to the operation's page as its delta event."""
    operation: RescaleOperation = report["operation"]
    channel.publish(
        operation_group(operation.operation_id),
        Event.OPERATION_PROGRESS,
        operation_delta(
            operation=operation,
            version=report["version"],
            columns=report["columns"],
            steps=report["steps"],
            events=report["events"],
        ),
    )
