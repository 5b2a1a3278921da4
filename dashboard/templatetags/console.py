"""Template filters of the console."""

from __future__ import annotations

from typing import Any

from django import template

from dashboard import format as console_format
from dashboard.operation_timeline import is_milestone

register = template.Library()


@register.filter
def count(value: int | float | None) -> str:
    """A count with thousands separators, as every page prints it ("34,033")."""
    return console_format.count(value)


@register.filter
def rate(value: float | None) -> str:
    """A measured rate or count, rounded to a whole number, with thousands separators
    ("1,234"); "–" for none."""
    return console_format.count(None if value is None else round(value))


@register.filter
def size(value: int | float | None) -> str:
    """Bytes in the largest unit under 1024 of it, as every page prints it ("2.7 MB")."""
    return console_format.size(value)


@register.filter
def duration(seconds: Any) -> str:
    """Seconds in words ("12.5 s", "3 min 20 s")."""
    return console_format.duration(seconds)


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """``mapping[key]`` (None when absent), for keys held in variables."""
    return mapping.get(key) if mapping else None


@register.filter
def get_field(form: Any, name: str) -> Any:
    """``form[name]``: a bound field by a name held in a variable."""
    return form[name]


@register.filter
def operator_name(described: str) -> str:
    """An operator's description without its details (``dashboard.format.operator_name``)."""
    return console_format.operator_name(described or "")


@register.filter
def percent(share: float | None) -> str:
    """A share (0..1) as a whole percent, as every page prints it (``dashboard.format.percent``:
    "–" when there is none yet, which is not 0 %)."""
    return console_format.percent(share)


@register.filter
def milestone(event: Any) -> bool:
    """Whether an audit event is one of its operation's own (``dashboard.operation_timeline.is_milestone``)."""
    return is_milestone(event)
