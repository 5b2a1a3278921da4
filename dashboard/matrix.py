"""The cluster page's fragment × PU matrix, computed once on the server.

The matrix is derived from the same cluster view the REST API serves
(``dashboard.api.selectors.cluster.cluster_info``), so the page and ``GET /api/v1/cluster`` cannot
disagree: ``cluster_matrix`` reads it into rows and columns, ``matrix_view`` shows them as the
query string asks (a metric, by PU or by worker, a selected cell). The page is server-rendered;
live updates re-fetch the rendered matrix rather than re-implementing this arithmetic in
JavaScript. The workers table beside it is ``dashboard.cluster_workers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dashboard.format import count, size, vnode_ranges
from rescaler.cluster.models import ParallelUnit
from workers.control import WorkerStatus

METRICS: tuple[tuple[str, str], ...] = (
    ("vnodes", "vnodes"),
    ("keys", "keys"),
    ("bytes", "state bytes"),
    ("rows", "records, last epoch"),
)


def locality_share(locality: dict[str, Any] | None) -> float | None:
    """The share of a PU's (or a worker's) tasks that ran on its own worker's executor, from
    ``cluster_info()``'s ``locality``; None before any task was counted."""
    return None if not locality else locality.get("share")


@dataclass(frozen=True)
class PuColumn:
    """One parallel unit: a column of the matrix, headed by its worker and where it really ran.

    ``status`` is the PU's own (active, lost, removed), ``worker_status`` its worker's
    (docs/elastic-workers.md, Statuses); the header shows ``state``, the more telling of the two.
    ``last_executor``/``last_host`` are where its task ran in the last counted epoch and
    ``locality`` the share of its tasks that ran on its own worker's executor: a PU whose home
    is one worker may well run elsewhere (the state directory is shared), and an operator about
    to drain a worker wants to know.
    """

    pu: int
    worker: str
    alive: bool
    status: str = ParallelUnit.Status.ACTIVE
    worker_status: str = WorkerStatus.ACTIVE
    last_executor: str = ""
    last_host: str = ""
    locality: float | None = None

    @property
    def state(self) -> str:
        """What the header says: the PU's loss or removal first, else its worker's status."""
        if self.status != ParallelUnit.Status.ACTIVE:
            return self.status
        return self.worker_status

    @property
    def lost(self) -> bool:
        """Its worker disappeared without a drain: its vnodes wait to be moved to live PUs."""
        return ParallelUnit.Status.LOST in (self.status, self.worker_status)

    @property
    def ran_on(self) -> str:
        """``executor @ host`` of the last counted epoch; empty before any task was counted."""
        if not self.last_executor:
            return ""
        return f"{self.last_executor} @ {self.last_host}" if self.last_host else self.last_executor


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
    key: str  # the column the fragment is keyed by
    operator: str  # its operator, processor or keyed region, as the runner describes it
    busy_with: str | None
    cells: tuple[MatrixCell | None, ...]
    # metric -> max/mean over the fragment's PUs (1.0 is perfectly even; None without data)
    skew: dict[str, float | None]
    # whether a runner reports for its pipeline (``runner_alive``); not: an earlier run's state
    running: bool = True


@dataclass(frozen=True)
class PipelineEnds:
    """What a pipeline reads and where its outputs go, as the runner describes them."""

    pipeline: str
    source: str
    sink: str


@dataclass(frozen=True)
class Matrix:
    columns: tuple[PuColumn, ...]
    rows: tuple[MatrixRow, ...]
    epoch: int | None  # the epoch whose records the "rows" metric counts
    ends: tuple[PipelineEnds, ...] = ()
    # a past placement (``past_placement.placement_matrix``): vnodes only, no load, no PU's
    # state of now
    past: bool = False


def skew(values: list[int]) -> float | None:
    """max / mean: 1.0 when every PU carries the same, higher when one carries more."""
    if not values or sum(values) == 0:
        return None
    return max(values) / (sum(values) / len(values))


def pu_columns(cluster: dict[str, Any], shown: set[int]) -> tuple[PuColumn, ...]:
    """The PU columns of ``cluster_info()``'s answer: a removed PU only if it is in ``shown``."""
    statuses = {w["name"]: w.get("status", WorkerStatus.ACTIVE) for w in cluster["workers"]}
    return tuple(
        PuColumn(
            pu=int(pu),
            worker=info["worker"],
            alive=bool(info["alive"]),
            status=info.get("status", ParallelUnit.Status.ACTIVE),
            worker_status=statuses.get(info["worker"], WorkerStatus.ACTIVE),
            last_executor=info.get("last_executor", ""),
            last_host=info.get("last_host", ""),
            locality=locality_share(info.get("locality")),
        )
        for pu, info in cluster["parallel_units"].items()
        if info.get("status") != ParallelUnit.Status.REMOVED or int(pu) in shown
    )


def cluster_matrix(cluster: dict[str, Any]) -> Matrix:
    """The fragment × PU matrix of ``cluster_info()``'s answer.

    A removed PU (its worker was drained and decommissioned) has no column: it left the
    cluster. Unless a fragment still lists it, which would be a fault worth seeing.
    """
    running = {pu for frag in cluster["fragments"] for pu in frag.get("parallel_units") or []}
    columns = pu_columns(cluster, running)
    index = {c.pu: i for i, c in enumerate(columns)}
    running = {p["name"] for p in cluster.get("pipelines", []) if p.get("runner_alive")}
    rows = []
    epoch = None
    ends: dict[str, dict[str, str]] = {}
    for frag in cluster["fragments"]:
        if frag["kind"] in ("source", "sink"):
            ends.setdefault(frag["pipeline"], {})[frag["kind"]] = frag.get("operator") or ""
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
                key=frag.get("key") or "",
                operator=frag.get("operator") or "",
                busy_with=frag.get("busy_with"),
                cells=tuple(cells),
                skew={m: skew([c.value(m) for c in found]) for m, _ in METRICS},
                running=frag["pipeline"] in running,
            )
        )
    described = tuple(
        PipelineEnds(name, e.get("source", ""), e.get("sink", ""))
        for name, e in sorted(ends.items())
        if e.get("source") or e.get("sink")
    )
    return Matrix(columns=columns, rows=tuple(rows), epoch=epoch, ends=described)


# up to this many PU columns the matrix shows one column per PU; past it, one per worker, each
# opening onto its own PUs (1,024 PUs stay a table a person can read)
PU_COLUMNS_MAX = 32
BY_PU = "pu"
BY_WORKER = "worker"


@dataclass(frozen=True)
class ShownColumn:
    """A column of the matrix as shown: one PU, or one worker's PUs together."""

    key: str  # "pu-3" or "worker-local-0": what a cell's selection names
    label: str
    worker: str
    pus: tuple[PuColumn, ...]
    aggregated: bool

    @property
    def pu(self) -> int | None:
        return None if self.aggregated else self.pus[0].pu

    @property
    def state(self) -> str:
        """A lost PU first, else the worker's (or the PU's) status."""
        lost = [c for c in self.pus if c.lost]
        return (lost[0] if lost else self.pus[0]).state

    @property
    def lost(self) -> bool:
        return any(c.lost for c in self.pus)

    @property
    def alive(self) -> bool:
        return all(c.alive for c in self.pus)


@dataclass(frozen=True)
class ShownCell:
    """One fragment on one shown column: the sum of its PUs' cells there."""

    column: ShownColumn
    vnodes: int
    keys: int
    bytes: int
    rows: int
    vnode_list: tuple[int, ...]
    value: int  # of the chosen metric
    text: str  # the value as printed
    heat: float  # value over the largest value of its row (0..1)

    @property
    def vnode_text(self) -> str:
        return vnode_ranges(self.vnode_list)


@dataclass(frozen=True)
class ShownRow:
    row: MatrixRow
    cells: tuple[ShownCell | None, ...]
    skew: str


@dataclass(frozen=True)
class MatrixView:
    """The matrix as the page shows it: the chosen metric, by PU or by worker (or one
    worker's PUs), and the selected cell, all from the query string (no script needed)."""

    metric: str
    metric_label: str
    by: str
    worker: str | None  # the worker drilled into
    columns: tuple[ShownColumn, ...]
    rows: tuple[ShownRow, ...]
    selected: tuple[MatrixRow, ShownCell] | None
    epoch: int | None
    ends: tuple[PipelineEnds, ...]
    pu_count: int
    past: bool = False


def matrix_view(
    matrix: Matrix,
    *,
    metric: str | None = None,
    by: str | None = None,
    worker: str | None = None,
    cell: str | None = None,
) -> MatrixView:
    """``matrix`` shown for ``metric`` (default vnodes), ``by`` PU or worker (default: by PU
    up to ``PU_COLUMNS_MAX`` columns), or only ``worker``'s PUs; ``cell`` ("fragment/column
    key") selects a cell whose vnodes are listed. Unknown values fall back to the defaults; a
    past placement's matrix has only vnodes."""
    labels = dict(METRICS)
    metric = metric if metric in labels and not matrix.past else METRICS[0][0]
    workers = {c.worker for c in matrix.columns}
    worker = worker if worker in workers else None
    if worker is not None:
        by = BY_PU
    elif by not in (BY_PU, BY_WORKER):
        by = BY_PU if len(matrix.columns) <= PU_COLUMNS_MAX else BY_WORKER
    index = {c.pu: i for i, c in enumerate(matrix.columns)}
    if by == BY_PU:
        columns = tuple(
            ShownColumn(f"pu-{c.pu}", f"PU {c.pu}", c.worker, (c,), aggregated=False)
            for c in matrix.columns
            if worker is None or c.worker == worker
        )
    else:
        grouped: dict[str, list[PuColumn]] = {}
        for c in matrix.columns:
            grouped.setdefault(c.worker, []).append(c)
        columns = tuple(
            ShownColumn(f"worker-{name}", name, name, tuple(pus), aggregated=True)
            for name, pus in grouped.items()
        )
    show = size if metric == "bytes" else count
    rows = []
    selected = None
    for row in matrix.rows:
        sums: list[ShownCell | None] = []
        for column in columns:
            cells = [row.cells[index[c.pu]] for c in column.pus if row.cells[index[c.pu]]]
            if not cells:
                sums.append(None)
                continue
            figures = {m: sum(x.value(m) for x in cells if x) for m, _ in METRICS}
            vnodes = tuple(sorted(v for x in cells if x for v in x.vnode_list))
            sums.append(
                ShownCell(
                    column=column,
                    vnodes=figures["vnodes"],
                    keys=figures["keys"],
                    bytes=figures["bytes"],
                    rows=figures["rows"],
                    vnode_list=vnodes,
                    value=figures[metric],
                    text=show(figures[metric]),
                    heat=0.0,
                )
            )
        top = max((c.value for c in sums if c), default=0)
        shown = tuple(
            None
            if c is None
            else ShownCell(**{**c.__dict__, "heat": c.value / top if top else 0.0})
            for c in sums
        )
        value = row.skew.get(metric)
        rows.append(ShownRow(row, shown, "–" if value is None else f"{value:.2f}"))
        for one in shown:
            if one is not None and cell == f"{row.fragment}/{one.column.key}":
                selected = (row, one)
    return MatrixView(
        metric=metric,
        metric_label=labels[metric],
        by=by,
        worker=worker,
        columns=columns,
        rows=tuple(rows),
        selected=selected,
        epoch=matrix.epoch,
        ends=matrix.ends,
        pu_count=len(matrix.columns),
        past=matrix.past,
    )
