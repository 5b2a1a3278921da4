"""What the console's cluster page shows, computed once on the server.

The fragment × PU matrix is derived from the same cluster view the REST API serves
(``dashboard.api.selectors.cluster_info``), so the page and ``GET /api/v1/cluster`` cannot
disagree. The page is server-rendered; live updates re-fetch the rendered matrix rather than
re-implementing this arithmetic in JavaScript.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from rescaler.cluster.models import EpochMetric

METRICS: tuple[tuple[str, str], ...] = (
    ("vnodes", "vnodes"),
    ("keys", "keys"),
    ("bytes", "state bytes"),
    ("rows", "records, last epoch"),
)


@dataclass(frozen=True)
class PuColumn:
    """One parallel unit: a column of the matrix."""

    pu: int
    worker: str
    alive: bool


@dataclass(frozen=True)
class MatrixCell:
    """One (fragment, PU): its share of the fragment's state and of the last epoch's records."""

    pu: int
    vnodes: int
    keys: int
    bytes: int
    rows: int
    vnode_list: tuple[int, ...]
    # metric -> this cell's value over the largest of its row (0..1), for the heat colour
    heat: dict[str, float] = field(default_factory=dict)

    def value(self, metric: str) -> int:
        return int(getattr(self, metric))


@dataclass(frozen=True)
class MatrixRow:
    """One stateful fragment: a cell per column (None where the fragment does not run)."""

    fragment: str
    pipeline: str
    vnodes: int
    mapping_version: int | None
    busy_with: str | None
    cells: tuple[MatrixCell | None, ...]
    # metric -> max/mean over the fragment's PUs (1.0 is perfectly even; None without data)
    skew: dict[str, float | None]


@dataclass(frozen=True)
class Matrix:
    columns: tuple[PuColumn, ...]
    rows: tuple[MatrixRow, ...]
    epoch: int | None  # the epoch whose records the "rows" metric counts


def skew(values: list[int]) -> float | None:
    """max / mean: 1.0 when every PU carries the same, higher when one carries more."""
    if not values or sum(values) == 0:
        return None
    return max(values) / (sum(values) / len(values))


def cluster_matrix(cluster: dict[str, Any]) -> Matrix:
    """The fragment × PU matrix of ``cluster_info()``'s answer."""
    columns = tuple(
        PuColumn(int(pu), info["worker"], bool(info["alive"]))
        for pu, info in cluster["parallel_units"].items()
    )
    index = {c.pu: i for i, c in enumerate(columns)}
    rows = []
    epoch = None
    for frag in cluster["fragments"]:
        if frag["kind"] != "stateful":
            continue
        mapping = frag.get("mapping") or []
        vnodes_of: dict[int, list[int]] = {}
        for vnode, pu in enumerate(mapping):
            vnodes_of.setdefault(pu, []).append(vnode)
        load = {e["parallel_unit"]: e for e in frag["load"]["per_parallel_unit"]}
        epoch = frag["load"].get("epoch", epoch)
        found = []
        for pu in frag["parallel_units"]:
            entry = load.get(pu, {})
            found.append(
                MatrixCell(
                    pu=pu,
                    vnodes=int(entry.get("vnodes", 0)),
                    keys=int(entry.get("keys", 0)),
                    bytes=int(entry.get("bytes", 0)),
                    rows=int(entry.get("epoch_rows", 0)),
                    vnode_list=tuple(vnodes_of.get(pu, [])),
                )
            )
        tops = {m: max((c.value(m) for c in found), default=0) for m, _ in METRICS}
        cells: list[MatrixCell | None] = [None] * len(columns)
        for cell in found:
            heat = {m: (cell.value(m) / tops[m] if tops[m] else 0.0) for m, _ in METRICS}
            if cell.pu in index:
                cells[index[cell.pu]] = MatrixCell(**{**cell.__dict__, "heat": heat})
        rows.append(
            MatrixRow(
                fragment=frag["name"],
                pipeline=frag["pipeline"],
                vnodes=int(frag["vnodes"] or 0),
                mapping_version=frag.get("mapping_version"),
                busy_with=frag.get("busy_with"),
                cells=tuple(cells),
                skew={m: skew([c.value(m) for c in found]) for m, _ in METRICS},
            )
        )
    return Matrix(columns=columns, rows=tuple(rows), epoch=epoch)


def epoch_series(
    *,
    pipeline: str,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    limit: int = 300,
) -> dict[str, list[float]]:
    """The last ``limit`` epochs of a pipeline (within [since, until] when given), oldest first,
    as the charts' columns: commit time (unix s), records per second, epoch latency (ms)."""
    rows = EpochMetric.objects.filter(pipeline__name=pipeline)
    if since is not None:
        rows = rows.filter(committed_at__gte=since)
    if until is not None:
        rows = rows.filter(committed_at__lte=until)
    latest = list(
        rows.order_by("-epoch").values_list("epoch", "committed_at", "rows", "duration_s")[:limit]
    )
    latest.reverse()
    return {
        "epoch": [float(e) for e, _, _, _ in latest],
        "at": [at.timestamp() for _, at, _, _ in latest],
        "rows_per_s": [round(n / d, 1) if d > 0 else 0.0 for _, _, n, d in latest],
        "latency_ms": [round(d * 1000, 1) for _, _, _, d in latest],
    }
