"""The operation page's live feed: each progress report becomes one delta event.

``operation.progress`` on an operation's group (``/ws/operations/<operation_id>/``) carries the
operation's ``progress_version`` (one more than the event before) and only what changed since
that event, in the shapes of the operation document (``GET /api/v1/operations/<id>``, which
carries the version too): ``operation``, the document's own fields that changed (the columns
the report changed, and ``moved``, ``waiting`` and ``steps_done`` each time); ``steps``, the
rows whose figures changed; ``vnodes``, those steps' vnodes; ``events``, the audit events
appended. A page applies it when it holds the version before, and re-reads the document
otherwise. docs/api.md, "Websocket events", has the shapes.

The console's operation page gets the same delta as HTML, rendered by its socket's consumer
(``operation_page_delta``), not here: recording a barrier renders nothing, a report no page
watches is never rendered, and a page gets only the rows it shows (its socket names them), once
per version and set of rows in each server process whatever the number of pages. The event
carries what the report changed for that (``page_changes``: step numbers and audit event ids),
which the consumers strip before a JSON client sees it.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import OrderedDict
from typing import Any

from django.dispatch import receiver
from django.template.loader import render_to_string

from dashboard import operation_page
from dashboard.api.selectors.operations import step_vnodes
from dashboard.api.serializers.operations import (
    AuditEventSerializer,
    OperationDetailSerializer,
    OperationVnodeSerializer,
    StepSerializer,
)
from dashboard.delta_counts import (
    DeltaCounts,
    delta_groups,
    fragment_deltas,
    source_deltas,
    step_pus,
    vnode_patch,
)
from dashboard.format import moved_figures
from dashboard.operation_timeline import timeline_tail
from dashboard.plan_tables import PlacementTable, SourceProgressTable
from dashboard.tables import StepTable
from rescaler import events as channel
from rescaler.audit.models import AuditEvent
from rescaler.events import operation_group
from rescaler.operations.counts import StepCounts, StepGroup, step_counts, step_groups
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.signals import operation_progressed
from rescaler.operations.waiting import operation_waiting
from workers.rescale.protocol import Event

# the document's fields worked out from every step, sent with each delta (their size does not
# grow with the steps)
DERIVED = ("moved", "waiting", "steps_done")

# the payload key of an operation.progress event naming what the report changed, for the
# operation page's socket (``operation_page_delta``); JSON clients never receive it
PAGE_CHANGES = "page_changes"

# A barrier's record counts the PUs its steps touch apart for the page's socket when they are
# this few (a fluid barrier's handful, where the record's one scan saves the socket its own).
# A barrier of hundreds of steps touches most PUs: split by each, its groups would be hundreds,
# counted at every barrier and carried in its event whether a page watches or not; the page's
# socket counts those itself, only when one watches.
PAGE_GROUPS_MAX_PUS = 64

# the step numbers a page shows, as its socket's ``steps`` parameter says them ("1-100,205")
StepRanges = tuple[tuple[int, int], ...]
MAX_RANGES = 128  # a page shows STEPS_PER_PAGE rows (100): at most that many ranges
_RANGE = r"\d{1,9}(?:-\d{1,9})?"
STEP_RANGES = re.compile(rf"{_RANGE}(?:,{_RANGE}){{0,{MAX_RANGES - 1}}}")


@functools.cache
def _document_fields() -> Any:
    """The operation document's fields, built once per process (a barrier's delta represents the
    columns its report changed with them; building every field of the document at every
    barrier cost more than representing those). Its fields keep no state between objects."""
    return OperationDetailSerializer().fields


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
    fields = _document_fields()
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
    if steps:  # the document's vnode rows, of the changed steps only
        vnodes = list(OperationVnodeSerializer(step_vnodes(steps), many=True).data)
    return {
        "operation_id": operation.operation_id,
        "progress_version": version,
        "operation": changed,
        "steps": list(StepSerializer(steps, many=True).data),
        "vnodes": vnodes,
        "events": list(AuditEventSerializer(events, many=True).data),
    }


# what a delta's rest must not hold to follow its table rows in one message: after a ``<tr>``,
# a ``<template>``'s contents are parsed in table mode, where these tags are the table's own (or,
# a form, dropped) instead of the elements they are elsewhere
TABLE_MARKUP = re.compile(
    r"<(?:t(?:able|body|foot|head|r|d|h)|caption|colgroup|col|select|form)\b", re.IGNORECASE
)


def step_ranges(steps: list[int]) -> str:
    """The step numbers a page shows, as ranges: "1-100" for a sorted page, "3,9-10" otherwise
    (at most ``MAX_RANGES``)."""
    ranges: list[list[int]] = []
    for step in sorted(set(steps)):
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in ranges[:MAX_RANGES])


def parse_step_ranges(text: str) -> StepRanges | None:
    """``step_ranges`` read back; None (every row) for a socket that names none or garbles them."""
    if not STEP_RANGES.fullmatch(text):
        return None
    ranges = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return tuple(ranges)


def _shown(step: int, shown: StepRanges | None) -> bool:
    return shown is None or any(lo <= step <= hi for lo, hi in shown)


def operation_delta_html(
    *,
    operation: RescaleOperation,
    steps: list[RescaleStep],
    events: list[AuditEvent],
    waiting: dict[str, Any] | None,
    groups: list[StepGroup] | None = None,
    shown: StepRanges | None = None,
) -> list[str]:
    """The operation page's rendered delta, as the one websocket message htmx swaps in (a list:
    one message, or none when nothing changed). Of the changed ``steps``, only the rows the
    page shows (``shown``; None: all) are rendered; the rest (the placement and sources
    touched, the summary, the vnode grid's patch, the timeline) is the same for every page. Its
    size grows with the steps that changed, not with the operation's vnodes, and so does its
    cost: the figures of every step are counted in the database, in one scan (``groups``:
    ``dashboard.delta_counts.delta_groups`` of the PUs these steps touch, as the delta's record counted
    them; counted here when not given), and ``waiting`` is the delta's own.

    The table rows come first: htmx parses a message as the contents of a ``<template>``, whose
    first tag decides how the rest is parsed, and ``<tr>`` parses only as a table's. What
    follows them is then parsed as it would be anywhere, each element one of the template's
    children, provided it holds no table or form markup (``TABLE_MARKUP``: those tags would be
    taken as the table's, or dropped); a rest that does goes as a message of its own. One
    message, not the rows and the rest apart: between two messages the browser lays out and
    paints the page once more (at 32,768 vnodes, as long as applying the delta took)."""
    touched = step_pus(steps)
    if groups is None:
        groups = delta_groups(operation, pus=touched)
    counted = DeltaCounts.of_groups(groups, pus=touched)
    fragments = fragment_deltas(operation, pus=touched, counted=counted)
    context = {
        "oob": True,
        "steps_table": StepTable(
            sorted((s for s in steps if _shown(s.step, shown)), key=lambda s: s.step)
        ),
        # the placement and sources these steps touch, every fragment's in one table
        "placement_table": PlacementTable([p for f in fragments for p in f.placement]),
        "sources_table": SourceProgressTable(
            source_deltas(counted, only={(s.fragment, s.source_pu) for s in steps})
        ),
        "fragments": fragments,
        "summary": operation_page.operation_summary(
            operation,
            waiting=operation_page.waiting_of(waiting),
            counts=StepCounts.of_groups(groups),
        ),
        "measures": operation_page.MEASURES,
        "patch": json.dumps(vnode_patch(steps), separators=(",", ":")),
        "events": timeline_tail(events),
        # when the delta left the server, for the page's measure of how late events reach it
        "rendered_at": f"{time.time():.3f}",
    }
    rows = render_to_string("dashboard/operation/delta_rows.html", context).strip()
    rest = render_to_string("dashboard/operation/delta.html", context).strip()
    if rows and TABLE_MARKUP.search(rest):
        return [rows, rest]
    html = rows + rest
    return [html] if html else []


# the page deltas rendered last in this process, by (operation, version, rows shown): pages
# watching the same operation render each version once (consumers render on Channels' one
# thread for the database, so no lock is needed)
_RENDERED: OrderedDict[tuple[str, int, StepRanges | None], list[str]] = OrderedDict()
RENDERED_KEPT = 32


def operation_page_delta(
    *, operation_id: str, payload: dict[str, Any], shown: StepRanges | None
) -> list[str] | None:
    """An operation.progress event as the operation page's socket sends it: the rendered delta
    (``operation_delta_html``) of the rows the page shows, read from the database by what the
    event names as changed; None when the event names nothing (the page then re-reads)."""
    changes = payload.get(PAGE_CHANGES)
    version = payload.get("progress_version")
    if not isinstance(changes, dict) or not isinstance(version, int):
        return None
    key = (operation_id, version, shown)
    if key in _RENDERED:
        _RENDERED.move_to_end(key)
        return _RENDERED[key]
    # not the plan (megabytes, mostly its moves): its placements are kept per process
    # (``dashboard.delta_counts.planned_placements``)
    operation = RescaleOperation.objects.defer("plan").filter(operation_id=operation_id).first()
    if operation is None:
        return None
    steps = list(RescaleStep.objects.filter(operation=operation, step__in=changes["steps"]))
    events = list(AuditEvent.objects.filter(pk__in=changes["events"]).order_by("id"))
    waiting = (payload.get("operation") or {}).get("waiting")
    html = operation_delta_html(
        operation=operation,
        steps=steps,
        events=events,
        waiting=waiting,
        groups=_groups_of(changes.get("groups")),
        shown=shown,
    )
    _RENDERED[key] = html
    while len(_RENDERED) > RENDERED_KEPT:
        _RENDERED.popitem(last=False)
    return html


def _groups_of(given: Any) -> list[StepGroup] | None:
    """The record's step groups as the event carries them; None (counted by the socket) when
    the record left them to it (``PAGE_GROUPS_MAX_PUS``) or they do not parse."""
    if not isinstance(given, list):
        return None
    try:
        return [StepGroup.from_json(g) for g in given]
    except (ValueError, TypeError):
        return None


@receiver(operation_progressed, dispatch_uid="dashboard.operation_progress_published")
def operation_progress_publish(sender: Any, **report: Any) -> None:
    """Publish a progress report to the operation's page as its delta event, naming what it
    changed for the console's page (rendered by its socket, only when one watches)."""
    operation: RescaleOperation = report["operation"]
    # every step counted once, in one scan: for the delta's figures, and for the page's socket
    # (the PUs the changed steps touch counted apart, when they are few), which renders from them
    touched = step_pus(report["steps"])
    carried = len(touched) <= PAGE_GROUPS_MAX_PUS
    groups = delta_groups(operation, pus=touched) if carried else step_groups(operation)
    delta = operation_delta(
        operation=operation,
        version=report["version"],
        columns=report["columns"],
        steps=report["steps"],
        events=report["events"],
        counts=StepCounts.of_groups(groups),
    )
    delta[PAGE_CHANGES] = {
        "steps": [s.step for s in report["steps"]],
        "events": [e.pk for e in report["events"]],
        "groups": [g.to_json() for g in groups] if carried else None,
    }
    channel.publish(operation_group(operation.operation_id), Event.OPERATION_PROGRESS, delta)
