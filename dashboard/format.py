"""Numbers in the console's words, decided once, on the server: thousands separators, sizes in
1024-steps, durations. Every page, partial and rendered live update prints a figure through
these (the browser formats nothing)."""

from __future__ import annotations

from typing import Any

from rescaler.operations.counts import StepCounts
from rescaler.operations.models import RescaleOperation
from rescaler.operations.selectors import Moved, operation_moved
from rescaler.percent import whole_percent

SIZE_UNITS = ("B", "KB", "MB", "GB", "TB")


def count(value: int | float | None) -> str:
    """A count with thousands separators ("34,033"); "–" for none."""
    if value is None:
        return "–"
    return f"{value:,}"


def size(value: int | float | None) -> str:
    """Bytes in the largest unit under 1024 of it ("2.7 MB")."""
    if value is None:
        return "–"
    amount = float(value)
    unit = 0
    while amount >= 1024 and unit < len(SIZE_UNITS) - 1:
        amount /= 1024
        unit += 1
    return f"{amount:.{1 if unit else 0}f} {SIZE_UNITS[unit]}"


def duration(seconds: Any) -> str:
    """Seconds as "0.42 s", "12.5 s", "3 min 20 s", "2 h 5 min", "3 d 4 h"; "–" for none."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    if s < 0 or s != s:
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


def operator_name(described: str) -> str:
    """An operator's description without its parenthesised details (a processor's interface,
    time mode and state variables): "Sessions (row, time EventTime; value session<...>)" is
    "Sessions", a region "Sessions → Totals". The matrix shows it, and the whole in a
    disclosure, so that a long state schema never widens the fragment's column."""
    out, depth = [], 0
    for ch in described:
        if ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return " ".join("".join(out).split())


def vnode_ranges(vnodes: Any) -> str:
    """Vnodes as runs: "0–127 256 300–301" (16,384 vnodes in a row stay one word)."""
    runs: list[list[int]] = []
    for v in sorted(int(v) for v in vnodes):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return " ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs) or "none"


def percent(share: float | None) -> str:
    """A share (0..1) in words, "75 %" (``rescaler.percent.whole_percent``: rounded down, never
    over 100 %); "–" when there is none yet (nothing planned, no task counted), which is not 0 %."""
    whole = whole_percent(share)
    return "–" if whole is None else f"{whole} %"


def moved_text(measure: str, moved: Moved) -> str:
    """Moved against planned, honestly: "1,200 of 34,033 (4 %)"; once keys arrived in moving
    vnodes, "34,467 moved: 34,033 of 34,033 planned at the start (100 %); 434 arrived during
    the move" (never a share over 100 %)."""
    show = size if measure == "bytes" else count
    share = "" if moved.share is None else percent(moved.share)
    if not moved.arrived:
        return f"{show(moved.moved)} of {show(moved.planned)}" + (f" ({share})" if share else "")
    return (
        f"{show(moved.moved)} moved: {show(moved.of_plan)} of {show(moved.planned)} planned at "
        "the start" + (f" ({share})" if share else "") + f"; {show(moved.arrived)} arrived "
        "during the move"
    )


def moved_figures(
    op: RescaleOperation, *, counts: StepCounts | None = None
) -> dict[str, dict[str, Any]]:
    """Keys, bytes and vnodes of the operation, planned against moved, each with its words:
    what the API's ``moved`` carries and the operation page prints (``counts``: its steps
    counted, when the caller has them)."""
    return {
        measure: {
            "planned": m.planned,
            "moved": m.moved,
            "arrived": m.arrived,
            "share": m.share,
            "text": moved_text(measure, m),
        }
        for measure, m in operation_moved(op, counts=counts).items()
    }
