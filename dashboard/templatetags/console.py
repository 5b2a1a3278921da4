"""Template filters of the console."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """``mapping[key]`` (None when absent), for keys held in variables."""
    return mapping.get(key) if mapping else None


@register.filter
def percent(share: float | None) -> str:
    """A share (0..1) as a whole percentage; "–" when there is none yet (no task counted),
    which is not the same as 0 % (every task ran away from home)."""
    if share is None:
        return "–"
    return f"{round(share * 100)} %"
