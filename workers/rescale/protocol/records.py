"""Records of the protocol as JSON: field by field, no deep copy."""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def shallow_fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, values as they are. Not ``asdict``: records written at
    every change (progress reports, state files) would pay for a deep copy of every step; the
    caller converts the fields that need it."""
    return {f.name: getattr(record, f.name) for f in fields(record)}
