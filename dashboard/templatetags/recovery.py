"""Template filters of the Snapshots page: numbers as the other pages print them (thousands
separated by commas, as ``format.js`` does with ``toLocaleString``), ages and durations."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def thousands(value: Any) -> str:
    """1234567 as "1,234,567"; "–" for nothing."""
    if value is None or value == "":
        return "–"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def duration(seconds: Any) -> str:
    """Seconds as "0.42 s", "12.5 s", "3 min 20 s", "2 h 5 min", "3 d 4 h" (format.js's
    ``duration``, with days for snapshots kept for long)."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    if s < 0:
        return "–"
    if s < 1:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    m = int(s // 60)
    if m < 60:
        return f"{m} min {round(s % 60)} s"
    h = m // 60
    if h < 24:
        return f"{h} h {m % 60} min"
    return f"{h // 24} d {h % 24} h"
