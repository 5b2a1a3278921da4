"""Validation of an operation request against the cluster (the request itself, and its parser,
are ``workers.rescale.protocol.OperationRequest``).

Everything is checked before anything moves; the first problem found is raised with a reason a
person can act on and a stable ``code`` an automation can branch on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workers.rescale import errors
from workers.rescale.protocol import OperationRequest


@dataclass(frozen=True)
class FragmentView:
    """What validation and planning need to know of one fragment."""

    name: str
    stateful: bool
    parallel_units: tuple[int, ...]
    mapping: tuple[int, ...] = ()  # vnode -> PU
    vnode_load: dict[int, tuple[int, int]] = field(default_factory=dict)  # vnode -> (keys, bytes)
    busy_with: str | None = None  # the id of the operation in progress on it


@dataclass(frozen=True)
class ClusterView:
    """The cluster as validation sees it: PUs, their workers' liveness, fragments."""

    pu_worker: dict[int, str]
    worker_alive: dict[str, bool]
    fragments: dict[str, FragmentView]


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
        for pu in (*change.added_parallel_units, *change.removed_parallel_units):
            if pu not in cluster.pu_worker:
                raise errors.UnknownParallelUnit(
                    f"{name}: parallel unit {pu} does not exist; known: {sorted(cluster.pu_worker)}"
                )
        for pu in change.added_parallel_units:
            worker = cluster.pu_worker[pu]
            if not cluster.worker_alive.get(worker, False):
                raise errors.DeadWorker(
                    f"{name}: parallel unit {pu} is on worker {worker!r}, which is not alive"
                )
            if pu in frag.parallel_units:
                raise errors.AlreadyInFragment(f"{name}: parallel unit {pu} already runs it")
        for pu in change.removed_parallel_units:
            if pu not in frag.parallel_units:
                raise errors.NotInFragment(
                    f"{name}: parallel unit {pu} does not run it (it runs on {list(frag.parallel_units)})"
                )
        remaining = (set(frag.parallel_units) - set(change.removed_parallel_units)) | set(
            change.added_parallel_units
        )
        if not remaining:
            raise errors.RemovesEveryUnit(
                f"{name}: the request removes every parallel unit; at least one must remain"
            )
        if frag.busy_with is not None:
            raise fragment_busy(name, frag.busy_with)
