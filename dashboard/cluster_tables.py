"""The cluster page's smaller tables as django-tables2 classes (``dashboard.tables`` has its
workers'): the components' health, the running operations, the mapping versions a past
placement shows and the recent epochs under each autoscaling signal chart. None is sortable:
each lists rows in the order their selector gives."""

from __future__ import annotations

from typing import Any

import django_tables2 as tables
from django.template.defaultfilters import date, floatformat
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from dashboard.format import count, percent
from rescaler.autoscaling.figures import EpochFigures
from rescaler.operations.models import RescaleOperation

NOT_REPORTED = "not reported"


class ComponentTable(tables.Table):
    """Each component's health as ``/healthz`` says it: up or down, its details and error
    (rows: ``dashboard.views.site.component_rows``)."""

    name = tables.Column(verbose_name="Component", attrs={"td": {"class": "name"}})
    status = tables.Column(verbose_name="Status")
    details = tables.Column(
        verbose_name="Details", empty_values=(), attrs={"td": {"class": "details"}}
    )

    class Meta:
        attrs = {"class": "components", "tbody": {"id": "components"}}
        row_attrs = {"data-component": lambda record: record["name"]}
        orderable = False
        empty_text = "No component is checked."

    def render_status(self, value: str) -> str:
        return format_html('<span class="badge {}">{}</span>', value, value)

    def render_details(self, record: dict[str, Any]) -> str:
        pairs = format_html_join("", '<span class="kv"><b>{}</b> {}</span>', record["details"])
        if record.get("error"):
            return format_html('{}<div class="error">{}</div>', pairs, record["error"])
        return pairs


class RunningOperationTable(tables.Table):
    """The operations not yet final, with their steps done of planned (``steps_total`` and
    ``steps_done`` counted by ``operation_list``)."""

    operation_id = tables.Column(
        verbose_name="Operation",
        linkify=("dashboard:operation", {"operation_id": tables.A("operation_id")}),
        attrs={"td": {"class": "name"}},
    )
    fragments = tables.Column(verbose_name="Fragments", empty_values=())
    strategy = tables.Column(verbose_name="Strategy")
    status = tables.Column(verbose_name="Status")
    steps = tables.Column(verbose_name="Steps", empty_values=())

    class Meta:
        attrs = {"class": "components running"}
        row_attrs = {"data-operation": lambda record: record.operation_id}
        orderable = False
        empty_text = "None: the placement is at rest."

    def render_operation_id(self, value: str) -> str:
        return format_html("<code>{}</code>", value)

    def render_fragments(self, value: Any) -> str:
        return ", ".join(value)

    def render_status(self, value: str) -> str:
        return format_html('<span class="badge">{}</span>', value)

    def render_steps(self, record: RescaleOperation) -> str:
        done, total = record.steps_done, record.steps_total  # type: ignore[attr-defined]
        return format_html(
            '<progress max="{}" value="{}"></progress> {} / {}',
            total or 1,
            done,
            count(done),
            count(total),
        )


def _moment(value: Any) -> str:
    return format_html(
        '<time datetime="{}">{}</time>', date(value, "c"), date(value, "Y-m-d H:i:s")
    )


class PastVersionTable(tables.Table):
    """The mapping version of each fragment a past placement shows: since and until when, the
    operation that made it, and links to the kept versions on either side (rows:
    ``dashboard.past_placement.PastRow``; its links keep the page's query string, so the
    table needs the request: ``RequestConfig``)."""

    fragment = tables.Column(verbose_name="Fragment", attrs={"td": {"class": "name"}})
    version = tables.Column(
        verbose_name="Version", empty_values=(), attrs={"td": {"class": "version"}}
    )
    effective_at = tables.Column(verbose_name="Took effect", default="–")
    superseded_at = tables.Column(verbose_name="Until", empty_values=())
    made_by = tables.Column(
        verbose_name="Made by",
        accessor="operation_id",
        empty_values=(),
        attrs={"td": {"class": "made-by"}},
    )
    step = tables.TemplateColumn(
        template_name="dashboard/partials/past_version_step.html",
        verbose_name="Step",
        attrs={"td": {"class": "step"}},
    )

    class Meta:
        attrs = {"class": "components past-versions", "aria-label": "Mapping versions shown"}
        row_attrs = {
            "data-fragment": lambda record: record.fragment,
            "class": lambda record: "asked" if record.asked else "",
        }
        orderable = False
        empty_text = "No stateful fragment had a mapping version."

    def render_fragment(self, value: str, record: Any) -> str:
        return format_html('{} <span class="sub">{}</span>', value, record.pipeline)

    def render_version(self, value: int | None) -> str:
        return "none yet" if value is None else f"v{value}"

    def render_effective_at(self, value: Any) -> str:
        return _moment(value)

    def render_superseded_at(self, value: Any, record: Any) -> str:
        if value:
            return _moment(value)
        return "in effect now" if record.version is not None else "–"

    def render_made_by(self, value: str | None, record: Any) -> str:
        if value:
            url = reverse("dashboard:operation", kwargs={"operation_id": value})
            return format_html('<a href="{}">operation <code>{}</code></a>', url, value)
        if record.version is not None:
            return "no operation (a start or a re-registration)"
        return "–"


def _reported(value: float | None, text: str) -> str:
    return NOT_REPORTED if value is None else text


class SignalEpochTable(tables.Table):
    """The recent epochs of one fragment as the autoscaler reads them, newest first: what the
    page without JavaScript reads of its signal chart (rows: ``EpochFigures``)."""

    epoch = tables.Column(verbose_name="Epoch")
    parallel_units = tables.Column(verbose_name="PUs")
    input_rate = tables.Column(verbose_name="Input rate", empty_values=())
    capacity = tables.Column(verbose_name="Capacity", empty_values=())
    true_rate_per_pu = tables.Column(verbose_name="Per busy s per PU", empty_values=())
    busy_fraction = tables.Column(verbose_name="Busy", empty_values=())
    skew = tables.Column(verbose_name="Skew", empty_values=())

    class Meta:
        row_attrs = {"data-epoch": lambda record: record.epoch}
        orderable = False
        empty_text = "No epoch in the autoscaler's read window."
        template_name = "dashboard/tables/captioned.html"

    def __init__(self, data: list[EpochFigures], *, fragment: str, **kwargs: Any) -> None:
        super().__init__(
            data,
            attrs={"class": "decisions signals-table", "data-fragment": fragment},
            **kwargs,
        )
        n = len(data)
        self.caption = f"The last {n} epoch{'' if n == 1 else 's'}, newest first"

    def render_input_rate(self, value: float) -> str:
        return f"{_rate(value)}/s"

    def render_capacity(self, value: float | None) -> str:
        return _reported(value, f"{_rate(value)}/s")

    def render_true_rate_per_pu(self, value: float | None) -> str:
        return _reported(value, _rate(value))

    def render_busy_fraction(self, value: float | None) -> str:
        return _reported(value, percent(value))

    def render_skew(self, value: float) -> str:
        return floatformat(value, 2)


def _rate(value: float | None) -> str:
    """A measured rate rounded to a whole number (the ``rate`` filter of the templates)."""
    return count(None if value is None else round(value))
