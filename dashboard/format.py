"""Numbers in the console's words, on the server: the same formats as ``static/dashboard/
format.js`` (thousands separators, sizes in 1024-steps), so a server-rendered page and a live
update print a figure the same way."""

from __future__ import annotations

from typing import Any

from rescaler.operations.models import RescaleOperation
from rescaler.operations.selectors import Moved, operation_moved

SIZE_UNITS = ("B", "KB", "MB", "GB", "TB")


def count(value: int | float | None) -> str:
    """A count with thousands separators ("34,033"); "–" for none."""
    if value is None:
        return "–"
    return f"{value:,}"


def size(value: int | float | None) -> str:
    """Bytes in the largest unit under 1024 of it ("2.7 MB"), as ``format.js`` ``bytes``."""
    if value is None:
        return "–"
    amount = float(value)
    unit = 0
    while amount >= 1024 and unit < len(SIZE_UNITS) - 1:
        amount /= 1024
        unit += 1
    return f"{amount:.{1 if unit else 0}f} {SIZE_UNITS[unit]}"


def percent(share: float | None) -> str:
    """A share (0..1) as a whole percentage, never over 100 %."""
    return "" if share is None else f"{min(round(share * 100), 100)} %"


def moved_text(measure: str, moved: Moved) -> str:
    """Moved against planned, honestly: "1,200 of 34,033 (4 %)"; once keys arrived in moving
    vnodes, "34,467 moved: 34,033 of 34,033 planned at the start (100 %); 434 arrived during
    the move" (never a share over 100 %)."""
    show = size if measure == "bytes" else count
    share = percent(moved.share)
    if not moved.arrived:
        return f"{show(moved.moved)} of {show(moved.planned)}" + (f" ({share})" if share else "")
    return (
        f"{show(moved.moved)} moved: {show(moved.of_plan)} of {show(moved.planned)} planned at "
        "the start" + (f" ({share})" if share else "") + f"; {show(moved.arrived)} arrived "
        "during the move"
    )


def moved_figures(op: RescaleOperation) -> dict[str, dict[str, Any]]:
    """Keys, bytes and vnodes of the operation, planned against moved, each with its words:
    what the API's ``moved`` carries and the operation page prints."""
    return {
        measure: {
            "planned": m.planned,
            "moved": m.moved,
            "arrived": m.arrived,
            "share": m.share,
            "text": moved_text(measure, m),
        }
        for measure, m in operation_moved(op).items()
    }
