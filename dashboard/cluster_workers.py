"""The cluster page's workers table, computed once on the server.

One row per worker of the cluster view the REST API serves
(``dashboard.api.selectors.cluster.cluster_info``), with the actions its status allows, so the page
offers only what the services would accept and never re-implements those rules in JavaScript
(the table itself is ``dashboard.tables.WorkerTable``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboard.matrix import locality_share
from workers.control import WorkerStatus

# the statuses whose worker still serves its PUs (an operator may still act on it)
ACTIONABLE = (WorkerStatus.ACTIVE, WorkerStatus.CORDONED)


@dataclass(frozen=True)
class WorkerRow:
    """One worker in the console's workers table, and which actions its status allows.

    The allowed actions mirror the services' rules (``rescaler.runner.workers``): cordon an
    active worker, uncordon a cordoned one, drain either. The page offers only those, so an
    operator is not invited to click into a certain 409; the service still decides.
    """

    name: str
    pipeline: str
    status: str
    reason: str
    alive: bool
    executor_id: str
    host: str
    cores: int
    parallel_units: tuple[int, ...]
    bootstrapped_epoch: int | None
    drain_operation_id: str | None
    locality: float | None
    # its preemption notice: {"at", "deadline", "origin"} (rescaler/runner/workers/notices.py)
    notice: dict[str, Any] | None = None

    @property
    def notice_text(self) -> str:
        """When the worker said it goes, and who said so; "" without a notice."""
        if not self.notice:
            return ""
        deadline = self.notice["deadline"]
        origin = "Spark decommission" if self.notice.get("origin") == "spark" else "platform"
        return f"leaves by {deadline:%Y-%m-%d %H:%M:%S} UTC ({origin} notice)"

    @property
    def can_cordon(self) -> bool:
        return self.status == WorkerStatus.ACTIVE

    @property
    def can_uncordon(self) -> bool:
        return self.status == WorkerStatus.CORDONED

    @property
    def can_drain(self) -> bool:
        return self.status in ACTIONABLE

    @property
    def gone(self) -> bool:
        """Lost or removed: nothing to act on, kept in the table for the record."""
        return self.status in (WorkerStatus.LOST, WorkerStatus.REMOVED)

    @property
    def bootstrap(self) -> str:
        """The bootstrapped epoch in words: -1 means no vnode may go to its PUs yet, None a
        worker the registered topology named (its PUs existed from the start)."""
        if self.bootstrapped_epoch is None:
            return "from the start"
        if self.bootstrapped_epoch < 0:
            return "not yet"
        return f"epoch {self.bootstrapped_epoch}"


def worker_rows(cluster: dict[str, Any]) -> tuple[WorkerRow, ...]:
    """The workers of ``cluster_info()``'s answer: those still serving first, then the lost,
    then the removed (kept for the record, at the bottom), each group by name."""
    order = {WorkerStatus.LOST: 1, WorkerStatus.REMOVED: 2}
    rows = [
        WorkerRow(
            name=w["name"],
            pipeline=w["pipeline"],
            status=w.get("status", WorkerStatus.ACTIVE),
            reason=w.get("status_reason", ""),
            alive=bool(w["alive"]),
            executor_id=w.get("executor_id", ""),
            host=w.get("host", ""),
            cores=int(w.get("cores") or 0),
            parallel_units=tuple(w["parallel_units"]),
            bootstrapped_epoch=w.get("bootstrapped_epoch"),
            drain_operation_id=w.get("drain_operation_id"),
            locality=locality_share(w.get("locality")),
            notice=w.get("notice"),
        )
        for w in cluster["workers"]
    ]
    return tuple(sorted(rows, key=lambda r: (order.get(WorkerStatus(r.status), 0), r.name)))
