"""The tables of a rescale's plan and its progress as django-tables2 classes (``dashboard.tables``
has its steps'): the moves a preview shows on the rescale page, and on the operation page each
fragment's placement per PU and the steps done per source PU. The operation page's live deltas
render their touched rows with the same classes (``dashboard.live``), so a swapped-in row is the
row the page drew. None is sortable: the rows come in PU order."""

from __future__ import annotations

from typing import Any

import django_tables2 as tables
from django.utils.html import format_html

from dashboard.format import count
from dashboard.operation_fragments import PlacementRow, SourceProgress


class PlanMoveTable(tables.Table):
    """A preview's moves of one fragment, grouped by source and target PU, with the vnodes
    each moves (rows: ``dashboard.rescale_page.PlanMove``, their figures already in words)."""

    move = tables.Column(verbose_name="Move")
    vnodes = tables.Column(verbose_name="Vnodes")
    keys = tables.Column(verbose_name="Keys")
    bytes = tables.Column(verbose_name="Bytes")
    which = tables.Column(verbose_name="Which", attrs={"td": {"class": "which"}})

    class Meta:
        attrs = {"class": "components moves"}
        orderable = False
        empty_text = "No vnode moves."


class PlacementTable(tables.Table):
    """One fragment's vnodes per PU it touches: before the operation, as planned, and now
    (``now`` is marked ``changed`` once it differs from before). The first column's header is
    the fragment's name."""

    pu = tables.Column(verbose_name="PU", attrs={"td": {"class": "frag"}})
    before = tables.Column(
        verbose_name="before", attrs={"th": {"class": "num"}, "td": {"class": "num"}}
    )
    planned = tables.Column(
        verbose_name="planned", attrs={"th": {"class": "num"}, "td": {"class": "num"}}
    )
    now = tables.Column(
        verbose_name="now",
        attrs={
            "th": {"class": "num"},
            "td": {"class": lambda record: "num changed" if record.now != record.before else "num"},
        },
    )

    class Meta:
        row_attrs = {
            "id": lambda record: f"placement-{record.key}",
            "data-pu": lambda record: record.pu,
        }
        orderable = False
        empty_text = "No PU is touched."

    def __init__(self, data: list[PlacementRow], *, fragment: str = "", **kwargs: Any) -> None:
        attrs = {"class": "components placement", "aria-label": f"vnodes per PU of {fragment}"}
        super().__init__(data, attrs=attrs, **kwargs)
        if fragment:
            self.columns["pu"].column.verbose_name = fragment

    def render_pu(self, value: int) -> str:
        return f"PU {value}"

    def render_before(self, value: int) -> str:
        return count(value)

    def render_planned(self, value: int) -> str:
        return count(value)

    def render_now(self, value: int) -> str:
        return count(value)


class SourceProgressTable(tables.Table):
    """The steps out of each source PU of each fragment: how many are done, of how many."""

    source = tables.Column(verbose_name="Source", accessor="pu", attrs={"td": {"class": "name"}})
    done = tables.Column(verbose_name="Steps done")

    class Meta:
        attrs = {
            "class": "components per-source",
            "aria-label": "Steps done per source PU",
            "tbody": {"id": "per-source"},
        }
        row_attrs = {"id": lambda record: f"source-{record.key}"}
        orderable = False
        empty_text = "No step: nothing to move."

    def render_source(self, record: SourceProgress) -> str:
        return f"{record.fragment} · PU {record.pu}"

    def render_done(self, record: SourceProgress) -> str:
        return format_html(
            '<progress max="{}" value="{}"></progress> {} / {} steps done{}',
            record.total,
            record.done,
            count(record.done),
            count(record.total),
            " — done" if record.done == record.total else "",
        )
