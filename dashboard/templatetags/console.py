"""Template filters of the console."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """``mapping[key]`` (None when absent), for keys held in variables."""
    return mapping.get(key) if mapping else None
