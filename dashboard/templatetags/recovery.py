"""Template filters of the Snapshots page: numbers as the other pages print them (thousands
separated by commas, ``dashboard.format``), ages and durations."""

from __future__ import annotations

from typing import Any

from django import template

from dashboard import format as console_format

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
    """Seconds in words ("12.5 s", "3 min 20 s", "3 d 4 h"): ``dashboard.format.duration``."""
    return console_format.duration(seconds)
