"""Validation of an operation request against the cluster (the request itself, and its parser,
are ``workers.rescale.protocol.OperationRequest``).

Everything is checked before anything moves; the first problem found is raised with a reason a
person can act on and a stable ``code`` an automation can branch on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.control import WorkerStatus
from workers.rescale import errors
from workers.rescale.protocol import OperationRequest

# a PU's status (``rescaler.cluster.models.ParallelUnit.Status``): the data plane has no Django
PU_ACTIVE, PU_LOST, PU_REMOVED = "active", "lost", "removed"


@dataclass(frozen=True)
class FragmentView:
    """What validation and planning need to know of one fragment."""

    name: str
    stateful: bool
    parallel_units: tuple[int, ...]
    mapping: tuple[int, ...] = ()  # vnode -> PU
    vnode_load: dict[int, tuple[int, int]] = field(default_factory=dict)  # vnode -> (keys, bytes)
    busy_with: str | None = None  # the id of the operation in progress on it
    # vnode -> records per epoch as the stream measured them (``workers.vnode_load``)
    vnode_records: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterView:
    """The cluster as validation sees it: PUs, their workers' liveness, fragments, and the
    elastic workers' statuses (docs/elastic-workers.md). A worker or PU missing from the
    status maps is active; a worker missing from ``worker_bootstrapped_epoch`` (or None there)
    came with the registered topology, whose PUs exist from the start."""

    pu_worker: dict[int, str]
    worker_alive: dict[str, bool]
    fragments: dict[str, FragmentView]
    worker_status: dict[str, str] = field(default_factory=dict)
    worker_bootstrapped_epoch: dict[str, int | None] = field(default_factory=dict)
    pu_status: dict[int, str] = field(default_factory=dict)

    def open_to_vnodes(self, pu: int) -> bool:
        """Whether new vnodes may go to ``pu``: it and its worker are active."""
        worker = self.pu_worker.get(pu)
        return (
            self.pu_status.get(pu, PU_ACTIVE) == PU_ACTIVE
            and self.worker_status.get(worker or "", WorkerStatus.ACTIVE) == WorkerStatus.ACTIVE
        )

    def closed_parallel_units(self) -> frozenset[int]:
        """The PUs the planner must not give vnodes of its own choosing (cordoned, draining,
        leaving or lost): they keep what they hold, and nothing more."""
        return frozenset(pu for pu in self.pu_worker if not self.open_to_vnodes(pu))


def fragment_busy(fragment: str, operation_id: str) -> errors.FragmentBusy:
    """The refusal of a request for a fragment another operation holds (its one wording)."""
    return errors.FragmentBusy(
        f"{fragment}: operation {operation_id} is still in progress on this fragment; "
        f"wait for it or cancel it"
    )


def check_open(fragment: str, pu: int, worker: str, cluster: ClusterView) -> None:
    """Refuse to add a PU that may not take vnodes: lost or removed, on a worker that is not
    active, or whose stores the runner has not created yet. Removing such a PU stays allowed:
    that is how the vnodes of a lost worker move to live PUs."""
    pu_status = cluster.pu_status.get(pu, PU_ACTIVE)
    if pu_status == PU_LOST:
        raise errors.ParallelUnitLost(
            f"{fragment}: parallel unit {pu} is lost (worker {worker!r} disappeared); "
            f"move its vnodes off it by removing it, and add a live PU instead"
        )
    if pu_status == PU_REMOVED:
        raise errors.ParallelUnitRemoved(
            f"{fragment}: parallel unit {pu} left the cluster with worker {worker!r}"
        )
    status = cluster.worker_status.get(worker, WorkerStatus.ACTIVE)
    if status != WorkerStatus.ACTIVE:
        raise errors.WorkerNotActive(
            f"{fragment}: parallel unit {pu} is on worker {worker!r}, which is {status}: "
            f"no new vnodes go to it"
            + (
                " (uncordon it first if it should take some)"
                if status == WorkerStatus.CORDONED
                else ""
            )
        )
    bootstrapped = cluster.worker_bootstrapped_epoch.get(worker)
    if bootstrapped is not None and bootstrapped < 0:
        raise errors.WorkerNotBootstrapped(
            f"{fragment}: parallel unit {pu} is on worker {worker!r}, which joined but is not "
            f"bootstrapped yet (its stores are created at the next barrier); try again shortly"
        )


def validate(request: OperationRequest, cluster: ClusterView) -> None:
    """Raise the first reason the request cannot be carried out; return if it can."""
    for name, change in request.changes.items():
        frag = cluster.fragments.get(name)
        if frag is None:
            known = ", ".join(sorted(n for n, f in cluster.fragments.items() if f.stateful))
            raise errors.UnknownFragment(f"no fragment {name!r}; stateful fragments: {known}")
        if not frag.stateful:
            raise errors.NotStateful(f"fragment {name!r} has no keyed state to place")
        units = set(frag.parallel_units)  # a fragment may run on a thousand PUs
        for pu in (*change.added_parallel_units, *change.removed_parallel_units):
            if pu not in cluster.pu_worker:
                raise errors.UnknownParallelUnit(
                    f"{name}: parallel unit {pu} does not exist; known: {sorted(cluster.pu_worker)}"
                )
        for pu in change.added_parallel_units:
            worker = cluster.pu_worker[pu]
            check_open(name, pu, worker, cluster)
            if not cluster.worker_alive.get(worker, False):
                raise errors.DeadWorker(
                    f"{name}: parallel unit {pu} is on worker {worker!r}, which is not alive"
                )
            if pu in units:
                raise errors.AlreadyInFragment(f"{name}: parallel unit {pu} already runs it")
        for pu in change.removed_parallel_units:
            if pu not in units:
                raise errors.NotInFragment(
                    f"{name}: parallel unit {pu} does not run it (it runs on {list(frag.parallel_units)})"
                )
        remaining = (units - set(change.removed_parallel_units)) | set(change.added_parallel_units)
        if not remaining:
            raise errors.RemovesEveryUnit(
                f"{name}: the request removes every parallel unit; at least one must remain"
            )
        if frag.busy_with is not None:
            raise fragment_busy(name, frag.busy_with)
