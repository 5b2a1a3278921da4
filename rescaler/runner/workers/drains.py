"""Drains: a drain is an ordinary rescale operation (``operation_request``) that removes the
worker's PUs from every stateful fragment running on them; when it ends, ``worker_drain_settled``
(the receiver of ``operation_finished``) queues ``worker.decommission`` for the runner, or puts
the worker back to cordoned if the operation did not complete."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Fragment, Worker
from rescaler.cluster.reasons import clean_reason
from rescaler.cluster.services import command_submit
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import cluster_view
from rescaler.runner.workers.changes import (
    actor_of,
    announce,
    audit_object,
    conflict,
    locked,
    status_set,
    worker_summary,
)
from rescaler.runner.workers.errors import DrainEmptiesFragment
from workers.control import WorkerStatus
from workers.rescale.protocol import (
    REASON_MAX_CHARS,
    CommandKind,
    Event,
    Granularity,
    OperationRequest,
    OperationStatus,
    Strategy,
)


@dataclass(frozen=True)
class WorkerDrain:
    """What a drain started: the worker (draining, or decommissioning at once when no stateful
    fragment ran on it) and its operation (None in the second case)."""

    worker: Worker
    operation: RescaleOperation | None


def drain_request(
    worker: Worker, *, reason: str = "", granularity: Any = None
) -> OperationRequest | None:
    """The operation that moves every vnode off the worker: each stateful fragment running on
    its PUs loses them; None when no stateful fragment runs there. Refuses a drain that would
    leave a fragment without a PU."""
    changes: dict[str, Any] = {}
    fragments = (
        Fragment.objects.filter(
            pipeline_id=worker.pipeline_id,
            kind=Fragment.Kind.STATEFUL,
            parallel_units__worker=worker,
        )
        .distinct()
        .prefetch_related("parallel_units")
        .order_by("position")
    )
    # whether a PU may take the vnodes is the cluster view's one rule (ClusterView.open_to_vnodes)
    cluster = cluster_view(worker.pipeline)
    for frag in fragments:
        pus = list(frag.parallel_units.all())
        on_it = sorted(pu.number for pu in pus if pu.worker_id == worker.id)
        others = [pu for pu in pus if pu.worker_id != worker.id]
        if not others:
            raise DrainEmptiesFragment(
                f"cannot drain worker {worker.name!r}: fragment {frag.name!r} runs only on its "
                f"parallel units {on_it}; add a PU of another worker to {frag.name!r} first"
            )
        if not any(cluster.open_to_vnodes(pu.number) for pu in others):
            raise DrainEmptiesFragment(
                f"cannot drain worker {worker.name!r}: the other parallel units of fragment "
                f"{frag.name!r} ({sorted(pu.number for pu in others)}) take no new vnodes (their "
                f"workers are not active); add a PU of an active worker to {frag.name!r} first"
            )
        changes[frag.name] = {"removed_parallel_units": on_it}
    if not changes:
        return None
    words = f"drain worker {worker.name}" + (f": {reason}" if reason else "")
    body: dict[str, Any] = {
        "changes": changes,
        "strategy": Strategy.LIVE.value,
        "reason": words[:REASON_MAX_CHARS],
    }
    if granularity is not None:
        body["granularity"] = granularity
    return OperationRequest.parse(body)


@transaction.atomic
def worker_drain(
    *, user: Any, name: str, reason: str = "", granularity: Any = None, actor_name: str = ""
) -> WorkerDrain:
    """Cordon the worker and start the live operation that moves every vnode off it; when that
    operation completes the worker is decommissioned (``worker_drain_settled``). A worker whose
    PUs run no stateful fragment is decommissioned at once. All or nothing: a refused request
    (a fragment busy, one left without a PU) leaves the worker as it was. ``actor_name``: the
    component that asked when no user did (the autoscaler), as the audit names it."""
    reason = clean_reason(reason)
    if granularity is not None:
        Granularity.parse(granularity)  # a malformed one is refused before anything is locked
    worker = locked(name)
    if worker.status not in (WorkerStatus.ACTIVE, WorkerStatus.CORDONED):
        hint = {
            WorkerStatus.DRAINING: f"its drain operation {worker.drain_operation_id} is in progress",
            WorkerStatus.LOST: "move its vnodes with a request that removes its PUs",
        }.get(WorkerStatus(worker.status), "")
        raise conflict(worker, "drain", hint)
    before = worker_summary(worker)
    # cordoned first: the operation's planner gives none of the worker's PUs anything
    worker.status = WorkerStatus.CORDONED
    worker.save(update_fields=["status"])
    request = drain_request(worker, reason=reason, granularity=granularity)
    if request is None:
        _decommission(
            worker,
            user=user,
            actor_name=actor_name,
            reason=reason or "drained: no stateful fragment ran on it",
            before=before,
        )
        return WorkerDrain(worker, None)
    operation = operation_request(user=user, body=request, actor_name=actor_name)
    assert isinstance(operation, RescaleOperation)  # never a dry run
    worker.status = WorkerStatus.DRAINING
    worker.status_reason = reason
    worker.drain_operation_id = operation.operation_id
    worker.save(update_fields=["status", "status_reason", "drain_operation_id"])
    audit_record(
        actor=actor_of(user),
        actor_name=actor_name if actor_of(user) is None else "",
        action="worker.draining",
        obj=audit_object(worker),
        before=before,
        after={
            **worker_summary(worker),
            "reason": reason,
            "operation_id": operation.operation_id,
            "changes": {n: c.to_json() for n, c in request.changes.items()},
        },
    )
    announce(Event.WORKER_STATUS, worker)
    return WorkerDrain(worker, operation)


def _decommission(
    worker: Worker,
    *,
    user: Any = None,
    actor_name: str = "",
    reason: str,
    before: dict[str, Any] | None = None,
) -> None:
    """Queue ``worker.decommission`` for the runner: it drops the worker's PUs and stops its
    executor; the worker is removed when it is gone from the runner's report."""
    before = before or worker_summary(worker)
    worker.status = WorkerStatus.DECOMMISSIONING
    worker.status_reason = reason[:600]
    worker.save(update_fields=["status", "status_reason"])
    # the command's audit event is the worker's change: one event, with the command's id
    command_submit(
        pipeline=worker.pipeline,
        kind=CommandKind.WORKER_DECOMMISSION,
        payload={"worker": worker.name},
        user=actor_of(user),
        actor_name=actor_name,
        obj=audit_object(worker),
        action="worker.decommissioning",
        before=before,
        after=worker_summary(worker),
    )
    announce(Event.WORKER_STATUS, worker)


def worker_drain_settled(*, operation: RescaleOperation) -> Worker | None:
    """The hook of an operation that reached its final status: if it drained a worker, the
    worker is decommissioned (completed) or back to cordoned with the outcome (failed,
    cancelled). Runs in the caller's transaction; returns the worker, if there was one."""
    worker = (
        Worker.objects.select_for_update(of=("self",))
        .select_related("pipeline")
        .filter(drain_operation_id=operation.operation_id, status=WorkerStatus.DRAINING)
        .first()
    )
    if worker is None:
        return None
    if operation.status == OperationStatus.COMPLETED:
        _decommission(
            worker,
            actor_name="orchestrator",
            reason=f"drained by operation {operation.operation_id}",
        )
        return worker
    return status_set(
        worker,
        WorkerStatus.CORDONED,
        f"drain operation {operation.operation_id} {operation.status}: {operation.outcome}",
        "worker.drain_failed",
        actor_name="orchestrator",
        operation_id=operation.operation_id,
    )
