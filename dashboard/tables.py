"""The console's tables as django-tables2 classes: columns, their words and their sort keys
declared once. Sorting is the query string's ``sort`` (``?sort=-keys``), pagination its
``page``; both work without JavaScript."""

from __future__ import annotations

import json
from typing import Any

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from dashboard.format import count, duration, percent, size, vnode_ranges
from dashboard.step_phases import PHASE_SYMBOL, in_phase
from rescaler.audit.models import AuditEvent
from rescaler.operations.models import RescaleStep
from workers.rescale.protocol import AuditObject


class CountColumn(tables.Column):
    """A count with thousands separators."""

    attrs = {"td": {"class": "num"}, "th": {"class": "num"}}

    def render(self, value: Any) -> str:
        return count(value)


class SizeColumn(tables.Column):
    """Bytes in their largest unit under 1024."""

    attrs = {"td": {"class": "num"}, "th": {"class": "num"}}

    def render(self, value: Any) -> str:
        return size(value)


class StepTable(tables.Table):
    """The steps of one operation: what moves where, its phase and figures."""

    step = tables.Column(verbose_name="Step")
    fragment = tables.Column(verbose_name="Fragment")
    move = tables.Column(verbose_name="Move", accessor="source_pu", order_by=("source_pu",))
    vnodes = tables.Column(verbose_name="Vnodes", orderable=False)
    phase = tables.Column(verbose_name="Phase")
    keys = CountColumn(verbose_name="Keys", accessor="keys_moved", order_by=("keys_moved",))
    bytes = SizeColumn(verbose_name="Bytes", accessor="bytes_moved", order_by=("bytes_moved",))
    hold_queue = CountColumn(verbose_name="Hold queue")
    hold_bytes = SizeColumn(verbose_name="Held bytes")
    in_phase = tables.Column(verbose_name="In phase", empty_values=(), orderable=False)

    class Meta:
        attrs = {"class": "components steps", "id": "steps-table"}
        row_attrs = {
            "id": lambda record: f"step-{record.step}",
            "data-phase": lambda record: record.phase,
        }
        order_by = ("step",)
        empty_text = "No step: nothing to move."
        orderable = True

    def render_move(self, record: RescaleStep) -> str:
        return f"PU {record.source_pu} → PU {record.target_pu}"

    def render_vnodes(self, record: RescaleStep, value: Any) -> str:
        kr = record.key_range
        if kr is not None:  # one key range of a hot vnode cut by key
            return f"{vnode_ranges(value)}, key range {kr}"
        return vnode_ranges(value)

    def render_phase(self, value: str) -> str:
        return format_html(
            '<span class="vn phase-{}">{}</span> {}', value, PHASE_SYMBOL.get(value, "?"), value
        )

    def render_keys(self, record: RescaleStep) -> str:
        """Moved of planned (a step may move more: keys that arrived while it moved)."""
        return f"{count(record.keys_moved)} of {count(record.keys)}"

    def render_bytes(self, record: RescaleStep) -> str:
        return f"{size(record.bytes_moved)} of {size(record.bytes)}"

    def render_in_phase(self, record: RescaleStep) -> str:
        return in_phase(record)


class WorkerTable(tables.Table):
    """The workers of the cluster page: status, where they run, their PUs; sortable with
    ``?workers-sort=``. The actions column (for those allowed) links each action its status
    allows (``WorkerRow``) to its form."""

    name = tables.Column(verbose_name="Worker", attrs={"td": {"class": "name"}})
    status = tables.TemplateColumn(
        template_name="dashboard/partials/worker_status.html", verbose_name="Status"
    )
    executor_id = tables.Column(verbose_name="Executor", default="–")
    host = tables.Column(verbose_name="Host", default="–", attrs={"td": {"class": "host"}})
    cores = CountColumn(verbose_name="Cores")
    parallel_units = tables.Column(verbose_name="PUs", orderable=False)
    bootstrap = tables.Column(
        verbose_name="Bootstrapped", order_by=("bootstrapped_epoch",), empty_values=()
    )
    locality = tables.Column(verbose_name="Locality", empty_values=())
    reason = tables.Column(
        verbose_name="Reason", orderable=False, attrs={"td": {"class": "reason"}}
    )
    notice = tables.Column(
        verbose_name="Notice",
        accessor="notice_text",
        orderable=False,
        default="–",
        attrs={"td": {"class": "notice"}},
    )
    actions = tables.TemplateColumn(
        template_name="dashboard/partials/worker_actions.html",
        verbose_name="Actions",
        orderable=False,
        attrs={"td": {"class": "worker-actions"}},
    )

    class Meta:
        attrs = {"class": "components workers", "aria-labelledby": "workers-title"}
        row_attrs = {
            "data-worker": lambda record: record.name,
            "data-status": lambda record: record.status,
            "class": lambda record: "worker-row gone" if record.gone else "worker-row",
        }
        empty_text = (
            "No worker has registered yet: the runner reports its executors at its first barrier."
        )
        prefix = "workers-"

    def render_parallel_units(self, value: Any) -> str:
        return vnode_ranges(value) if value else "none"

    def render_locality(self, value: float | None) -> str:
        return percent(value)

    def render_reason(self, value: str) -> str:
        return value

    def order_bootstrap(self, records: Any, is_descending: bool) -> tuple[Any, bool]:
        """Never-bootstrapped (-1) first, then by epoch; a worker there from the start last."""
        key = lambda r: (r.bootstrapped_epoch is None, r.bootstrapped_epoch or 0)  # noqa: E731
        return sorted(records, key=key, reverse=is_descending), True

    def order_locality(self, records: Any, is_descending: bool) -> tuple[Any, bool]:
        key = lambda r: (r.locality is None, r.locality or 0.0)  # noqa: E731
        return sorted(records, key=key, reverse=is_descending), True


class HistoryTable(tables.Table):
    """Every operation with its reason and what it moved (numbers as every page prints them),
    newest first; sortable with ``?sort=``, 50 to a page."""

    operation_id = tables.Column(
        verbose_name="Operation",
        linkify=("dashboard:operation", {"operation_id": tables.A("operation_id")}),
    )
    fragments = tables.Column(verbose_name="Fragments", orderable=False)
    strategy = tables.Column(verbose_name="Strategy")
    status = tables.Column(verbose_name="Status")
    requested_by = tables.Column(
        verbose_name="Requested by", accessor="requested_by__username", default="—"
    )
    reason = tables.Column(
        verbose_name="Reason", orderable=False, attrs={"td": {"class": "reason"}}
    )
    created_at = tables.DateTimeColumn(verbose_name="Requested", format="Y-m-d H:i:s")
    duration = tables.Column(verbose_name="Duration", accessor="duration_s", orderable=False)
    vnodes_moved = CountColumn(verbose_name="Vnodes")
    keys_moved = CountColumn(verbose_name="Keys")
    bytes_moved = SizeColumn(verbose_name="Bytes")
    outcome = tables.Column(verbose_name="Outcome", orderable=False, default="")

    class Meta:
        attrs = {"class": "components history"}
        row_attrs = {"data-operation": lambda record: record.operation_id}
        empty_text = "No operation matches."
        order_by = ("-created_at",)

    def render_operation_id(self, value: str) -> str:
        return format_html("<code>{}</code>", value)

    def render_fragments(self, value: Any) -> str:
        return ", ".join(value)

    def render_status(self, value: str) -> str:
        return format_html('<span class="badge status-{}">{}</span>', value, value)

    def render_reason(self, value: str) -> str:
        if len(value) > 120:
            return format_html('<span title="{}">{}…</span>', value, value[:119])
        return value

    def render_duration(self, value: float | None) -> str:
        return "—" if value is None else duration(value)

    def render_outcome(self, value: str, record: Any) -> str:
        if record.error_code:
            return format_html("{} <code>{}</code>", value, record.error_code)
        return value


def changed_keys(before: Any, after: Any) -> set[str] | None:
    """The keys whose values an event changed, when its before and after are both objects
    (a worker's whole summary, say); None when there is no such difference to take."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return None
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


class JSONColumn(tables.Column):
    """An event's ``before`` or ``after``, as compact JSON: only the keys the event changed
    when both are objects (NetBox's difference), folded past 120 characters; the whole of it
    is in the CSV and the API."""

    attrs = {"td": {"class": "json"}}

    def render(self, value: Any, record: AuditEvent) -> str:
        keys = changed_keys(record.before, record.after)
        if keys is not None and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k in keys}
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        if len(text) > 120:
            return format_html('<code title="{}">{}…</code>', text, text[:119])
        return format_html("<code>{}</code>", text)


class AuditTable(tables.Table):
    """The audit log (NetBox's changelog): who did what to which object, with its state before
    and after; newest first, sortable with ``?sort=``, 50 to a page."""

    at = tables.DateTimeColumn(verbose_name="Time", format="Y-m-d H:i:s")
    actor_name = tables.Column(verbose_name="Actor")
    action = tables.Column(verbose_name="Action")
    object_type = tables.Column(verbose_name="Kind")
    object_id = tables.Column(verbose_name="Object", attrs={"td": {"class": "object"}})
    before = JSONColumn(verbose_name="Before", orderable=False, default="")
    after = JSONColumn(verbose_name="After", orderable=False, default="")

    class Meta:
        attrs = {"class": "components audit", "id": "audit-table"}
        row_attrs = {
            "data-event": lambda record: record.id,
            "data-action": lambda record: record.action,
        }
        empty_text = "No audit event matches."
        order_by = ("-at",)

    def render_action(self, value: str) -> str:
        return format_html("<code>{}</code>", value)

    def render_object_id(self, value: str, record: AuditEvent) -> str:
        """An operation's or a step's event links to the operation's page (a step's id is
        ``<operation_id>/<step>``); a pipeline's to its snapshots."""
        if record.object_type in (AuditObject.OPERATION, AuditObject.STEP):
            operation_id = value.split("/", 1)[0]
            url = reverse("dashboard:operation", kwargs={"operation_id": operation_id})
            return format_html('<a href="{}"><code>{}</code></a>', url, value)
        if record.object_type == AuditObject.PIPELINE and value:
            url = reverse("dashboard:pipeline-snapshots", kwargs={"pipeline": value})
            return format_html('<a href="{}">{}</a>', url, value)
        return value

    def order_at(self, queryset: Any, is_descending: bool) -> tuple[Any, bool]:
        """By time, then by id: events of one transaction share their ``at``."""
        fields = ("-at", "-id") if is_descending else ("at", "id")
        return queryset.order_by(*fields), True


def _figure(value: float | None, unit: str = "") -> str:
    return "not reported" if value is None else f"{count(round(value))}{unit}"


class DecisionTable(tables.Table):
    """The autoscaler's decisions (docs/autoscaling.md, "The history of decisions"): when, the
    mode, the kind, per fragment its PUs and the signals the decision rests on, why, and its
    outcome with the operation it started; newest first, sortable with ``?decisions-sort=``."""

    decided_at = tables.DateTimeColumn(verbose_name="Decided", format="Y-m-d H:i:s")
    pipeline = tables.Column(verbose_name="Pipeline", accessor="pipeline__name")
    mode = tables.Column(verbose_name="Mode")
    kind = tables.Column(verbose_name="Decision")
    fragments = tables.Column(verbose_name="PUs", orderable=False, empty_values=())
    signals = tables.Column(
        verbose_name="Signals (input, per busy s per PU, busy, backlog)",
        accessor="fragments",
        orderable=False,
        empty_values=(),
    )
    reasons = tables.Column(
        verbose_name="Why", orderable=False, empty_values=(), attrs={"td": {"class": "reason"}}
    )
    plan_id = tables.Column(verbose_name="Plan", orderable=False, default="—")
    outcome = tables.Column(verbose_name="Outcome", empty_values=())
    operation = tables.Column(
        verbose_name="Operation", accessor="operation__operation_id", default="—"
    )
    workers = tables.Column(
        verbose_name="Workers", accessor="workers_requested", orderable=False, empty_values=()
    )

    class Meta:
        attrs = {"class": "components decisions-history", "id": "decisions-table"}
        row_attrs = {
            "data-decision": lambda record: record.pk,
            "data-kind": lambda record: record.kind,
            "data-outcome": lambda record: record.outcome,
        }
        empty_text = "No decision matches: a pipeline in recommend or auto mode has them."
        order_by = ("-decided_at",)
        prefix = "decisions-"

    def render_kind(self, value: str) -> str:
        return format_html("<code>{}</code>", value)

    def render_fragments(self, value: Any) -> str:
        if not value:
            return "—"
        return format_html_join(
            ", ",
            "{} {} → {}{}",
            (
                (
                    f["fragment"],
                    f["parallel_units_now"],
                    f["parallel_units_after"],
                    ""
                    if f["predicted_utilisation"] is None
                    else f" ({percent(f['predicted_utilisation'])} busy after)",
                )
                for f in value
            ),
        )

    def render_signals(self, value: Any) -> str:
        lines = []
        for f in value:
            e = f.get("estimate")
            if not e:
                continue
            lines.append(
                f"{f['fragment']}: {_figure(e['input_rate'], '/s')}, "
                f"{_figure(e['true_rate_per_pu'])}, "
                f"{'not reported' if e['busy_fraction'] is None else percent(e['busy_fraction'])}, "
                f"{_figure(e['backlog'])}"
            )
        return "; ".join(lines) or "—"

    def render_reasons(self, value: Any) -> str:
        text = "; ".join(value)
        if len(text) > 160:
            return format_html('<span title="{}">{}…</span>', text, text[:159])
        return text

    def render_plan_id(self, value: str) -> str:
        return format_html('<code title="{}">{}</code>', value, value[:8])

    def render_outcome(self, value: str, record: Any) -> str:
        return format_html(
            '<span class="badge outcome-{}">{}</span> {}{}',
            value,
            value,
            record.outcome_reason,
            format_html(" <code>{}</code>", record.error_code) if record.error_code else "",
        )

    def render_workers(self, value: int, record: Any) -> str:
        """The worker provider's part: asked for how many, and the workers its scale-in
        removed."""
        said = [f"asked for {value}"] if record.workers_requested_at is not None else []
        if record.workers_released:
            said.append(f"removed {', '.join(record.workers_released)}")
        return "; ".join(said) or "—"

    def render_operation(self, value: str, record: Any) -> str:
        url = reverse("dashboard:operation", kwargs={"operation_id": value})
        return format_html(
            '<a href="{}"><code>{}</code></a> <span class="badge status-{}">{}</span>',
            url,
            value,
            record.operation.status,
            record.operation.status,
        )

    def order_decided_at(self, queryset: Any, is_descending: bool) -> tuple[Any, bool]:
        """By time, then by id."""
        fields = ("-decided_at", "-id") if is_descending else ("decided_at", "id")
        return queryset.order_by(*fields), True
