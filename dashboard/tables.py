"""The console's tables as django-tables2 classes: columns, their words and their sort keys
declared once. Sorting is the query string's ``sort`` (``?sort=-keys``), pagination its
``page``; both work without JavaScript."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import django_tables2 as tables
from django.utils.html import format_html

from dashboard.format import count, size
from dashboard.operation_page import PHASE_SYMBOL, in_phase
from rescaler.operations.models import RescaleStep


def vnode_ranges(vnodes: Iterable[int]) -> str:
    """Vnodes as runs: "0–127 256 300–301" (a step of 16,384 vnodes stays one line)."""
    runs: list[list[int]] = []
    for v in sorted(int(v) for v in vnodes):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return " ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs) or "none"


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

    def render_vnodes(self, value: Any) -> str:
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
