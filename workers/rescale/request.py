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

    def vnode_refusal(self, pu: int, fragment: str = "") -> errors.RescaleError | None:
        """Why no new vnodes may go to ``pu``, or None if they may. This is the one rule of it:
        validation, the planner's closed set, drains and the console's rescale form all ask it.
        A PU takes new vnodes when it is active (not lost or removed) and its worker is active
        (not cordoned, draining or leaving), bootstrapped (its stores exist) and alive. Removing
        a PU that takes none stays allowed: that is how a lost worker's vnodes move to live PUs."""
        on = f"{fragment}: " if fragment else ""
        worker = self.pu_worker.get(pu)
        if worker is None:
            return errors.UnknownParallelUnit(
                f"{on}parallel unit {pu} does not exist; known: {sorted(self.pu_worker)}"
            )
        pu_status = self.pu_status.get(pu, PU_ACTIVE)
        if pu_status == PU_LOST:
            return errors.ParallelUnitLost(
                f"{on}parallel unit {pu} is lost (worker {worker!r} disappeared); "
                f"move its vnodes off it by removing it, and add a live PU instead"
            )
        if pu_status == PU_REMOVED:
            return errors.ParallelUnitRemoved(
                f"{on}parallel unit {pu} left the cluster with worker {worker!r}"
            )
        status = self.worker_status.get(worker, WorkerStatus.ACTIVE)
        if status != WorkerStatus.ACTIVE:
            cordoned = " (uncordon it first if it should take some)"
            return errors.WorkerNotActive(
                f"{on}parallel unit {pu} is on worker {worker!r}, which is {status}: "
                f"no new vnodes go to it" + (cordoned if status == WorkerStatus.CORDONED else "")
            )
        bootstrapped = self.worker_bootstrapped_epoch.get(worker)
        if bootstrapped is not None and bootstrapped < 0:
            return errors.WorkerNotBootstrapped(
                f"{on}parallel unit {pu} is on worker {worker!r}, which joined but is not "
                f"bootstrapped yet (its stores are created at the next barrier); try again shortly"
            )
        if not self.worker_alive.get(worker, False):
            return errors.DeadWorker(
                f"{on}parallel unit {pu} is on worker {worker!r}, which is not alive"
            )
        return None

    def open_to_vnodes(self, pu: int) -> bool:
        """Whether new vnodes may go to ``pu`` (:meth:`vnode_refusal` finds no reason not to)."""
        return self.vnode_refusal(pu) is None

    def closed_parallel_units(self) -> frozenset[int]:
        """The PUs the planner must not give vnodes of its own choosing (:meth:`vnode_refusal`:
        lost, on a worker that is not active, bootstrapped or alive): they keep what they hold,
        and nothing more."""
        return frozenset(pu for pu in self.pu_worker if not self.open_to_vnodes(pu))


def fragment_busy(fragment: str, operation_id: str) -> errors.FragmentBusy:
    """The refusal of a request for a fragment another operation holds (its one wording)."""
    return errors.FragmentBusy(
        f"{fragment}: operation {operation_id} is still in progress on this fragment; "
        f"wait for it or cancel it"
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
            refusal = cluster.vnode_refusal(pu, name)
            if refusal is not None:
                raise refusal
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
