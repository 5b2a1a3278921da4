"""The operation page's live feed: each progress report becomes one delta event.

``operation.progress`` on an operation's group (``/ws/operations/<operation_id>/``) carries the
operation's ``progress_version`` (one more than the event before) and only what changed since
that event, in the shapes of the operation document (``GET /api/v1/operations/<id>``, which
carries the version too): ``operation``, the document's own fields that changed (the columns
the report changed, and ``moved``, ``waiting`` and ``steps_done`` each time); ``steps``, the
rows whose figures changed; ``vnodes``, those steps' vnodes; ``events``, the audit events
appended. A page applies it when it holds the version before, and re-reads the document
otherwise. docs/api.md, "Websocket events", has the shapes.

The same event carries, for the console's operation page only, the rows it changed rendered
as HTML (``page_html``, rendered once here, whatever the number of pages watching): the
operation page's consumer sends them to htmx, which swaps each in by its id
(``hx-swap-oob``); JSON clients receive the event without them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.db.models import Prefetch, prefetch_related_objects
from django.dispatch import receiver
from django.template.loader import render_to_string

from dashboard import operation_page
from dashboard.api import selectors
from dashboard.api.serializers import (
    AuditEventSerializer,
    OperationDetailSerializer,
    OperationVnodeSerializer,
    StepSerializer,
)
from dashboard.consumers import PAGE_HTML
from dashboard.format import moved_figures
from dashboard.tables import StepTable
from rescaler import events as channel
from rescaler.audit.models import AuditEvent
from rescaler.events import operation_group
from rescaler.operations.counts import StepCounts, step_counts
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.signals import operation_progressed
from rescaler.operations.waiting import operation_waiting
from workers.rescale.protocol import Event

# the document's fields worked out from every step, sent with each delta (their size does not
# grow with the steps)
DERIVED = ("moved", "waiting", "steps_done")


def operation_delta(
    *,
    operation: RescaleOperation,
    version: int,
    columns: list[str],
    steps: list[RescaleStep],
    events: list[AuditEvent],
    counts: StepCounts | None = None,
) -> dict[str, Any]:
    """The delta event of one progress report (see the module's docstring): built from the
    changed steps, and the figures of every step counted in one query (``step_counts``, unless
    given)."""
    counts = counts or step_counts(operation)
    operation.steps_done = counts.done  # type: ignore[attr-defined]  # as the document's annotation
    fields = OperationDetailSerializer(operation).fields
    changed: dict[str, Any] = {}
    for name in columns:
        field = fields[name]
        changed[name] = field.to_representation(field.get_attribute(operation))
    # the document's derived fields, as its serializer gives them, from the counts
    waiting = operation_waiting(operation, counts=counts)
    changed["moved"] = moved_figures(operation, counts=counts)
    changed["waiting"] = None if waiting is None else waiting.to_json()
    changed["steps_done"] = counts.done
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


def operation_delta_html(
    *,
    operation: RescaleOperation,
    steps: list[RescaleStep],
    events: list[AuditEvent],
    waiting: dict[str, Any] | None,
    counts: StepCounts | None = None,
) -> list[str]:
    """The operation page's rendered delta, as the websocket messages htmx swaps in: the table
    rows first, alone (HTML parses ``<tr>`` only among rows), then the rest. Its size grows with
    the steps that changed, not with the operation's vnodes, and so does its cost: the figures
    of every step are counted in the database (``counts`` and ``waiting`` are the delta's own,
    when given)."""
    touched = operation_page.step_pus(steps)
    fragments = operation_page.fragment_deltas(operation, pus=touched)
    context = {
        "oob": True,
        "steps_table": StepTable(sorted(steps, key=lambda s: s.step)),
        "fragments": fragments,
        "per_source": operation_page.per_source(
            operation, only={(s.fragment, s.source_pu) for s in steps}
        ),
        "summary": operation_page.operation_summary(
            operation, waiting=operation_page.waiting_of(waiting), counts=counts
        ),
        "measures": operation_page.MEASURES,
        "patch": json.dumps(operation_page.vnode_patch(steps), separators=(",", ":")),
        "events": events,
        # when the delta left the server, for the page's measure of how late events reach it
        "rendered_at": f"{time.time():.3f}",
    }
    rows = render_to_string("dashboard/operation/delta_rows.html", context).strip()
    rest = render_to_string("dashboard/operation/delta.html", context).strip()
    return [html for html in (rows, rest) if html]


@receiver(operation_progressed, dispatch_uid="dashboard.operation_progress_published")
def operation_progress_publish(sender: Any, **report: Any) -> None:
    """Publish a progress report to the operation's page as its delta event."""
    operation: RescaleOperation = report["operation"]
    counts = step_counts(operation)
    delta = operation_delta(
        operation=operation,
        version=report["version"],
        columns=report["columns"],
        steps=report["steps"],
        events=report["events"],
        counts=counts,
    )
    delta[PAGE_HTML] = operation_delta_html(
        operation=operation,
        steps=report["steps"],
        events=report["events"],
        waiting=delta["operation"]["waiting"],
        counts=counts,
    )
    channel.publish(operation_group(operation.operation_id), Event.OPERATION_PROGRESS, delta)
