"""Elastic workers, the control plane's half (docs/elastic-workers.md).

What the runner reports (``workers_record``: joins, losses, removals) and what operators ask
(``worker_cordon``, ``worker_uncordon``, ``worker_drain``, ``worker_add``). Every change of a
worker's status is audited (object type ``worker``) and published to the ``cluster`` group.

A drain is an ordinary rescale operation (``rescaler.operations.requests.operation_request``)
that removes the worker's PUs from every stateful fragment running on them; when it ends,
``worker_drain_settled`` queues ``worker.decommission`` for the runner, or puts the worker back
to cordoned if the operation did not complete. The operations app does not call it: it sends
``operation_finished`` where every operation reaches its final status, and this app's receiver
(``rescaler.runner.receivers``) calls it, so operations never import this app.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Fragment, ParallelUnit, Pipeline, RunnerCommand, Worker
from rescaler.cluster.services import GONE, PipelineNotFound, command_submit
from rescaler.events import CLUSTER_GROUP, publish
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import cluster_view
from workers.control import WorkerInfo, WorkerStatus
from workers.provider import ProviderError, provider_from_env
from workers.rescale import errors
from workers.rescale.protocol import (
    REASON_MAX_CHARS,
    AuditObject,
    CommandKind,
    Event,
    Granularity,
    OperationRequest,
    OperationStatus,
    Strategy,
)

log = logging.getLogger(__name__)

# the range of ``worker_add``'s cores (the API publishes it)
CORES_MIN, CORES_MAX = 1, 64


class WorkerError(errors.RescaleError):
    """Base of the refusals of worker actions (turned into a 4xx by the API, like the rest)."""

    code = "worker_error"


class UnknownWorker(WorkerError):
    code = "unknown_worker"


class WorkerStatusConflict(WorkerError):
    """The worker's status does not allow the action (cordon a lost worker, drain twice...)."""

    code = "worker_status_conflict"


class DrainEmptiesFragment(WorkerError):
    """The worker runs every PU of a fragment: draining it would leave the fragment none."""

    code = "drain_empties_fragment"


class ProviderRefused(WorkerError):
    """The worker provider cannot add a worker (none configured, the command failed...)."""

    code = "worker_provider_refused"


# -- summaries -----------------------------------------------------------------------------------
def worker_summary(worker: Worker) -> dict[str, Any]:
    """What an audit event's before/after and a ``worker.*`` event say of a worker."""
    return {
        "name": worker.name,
        "pipeline": worker.pipeline.name,
        "status": worker.status,
        "status_reason": worker.status_reason,
        "alive": worker.alive,
        "executor_id": worker.executor_id,
        "host": worker.host,
        "cores": worker.cores,
        "bootstrapped_epoch": worker.bootstrapped_epoch,
        "drain_operation_id": worker.drain_operation_id or None,
        "parallel_units": sorted(worker.parallel_units.values_list("number", flat=True)),
    }


def _object(worker: Worker) -> tuple[str, str]:
    return (AuditObject.WORKER, worker.name[:64])


def _announce(event: Event, worker: Worker) -> None:
    """Publish once the change is committed: a client never hears of a status that rolled back."""
    summary = worker_summary(worker)
    transaction.on_commit(partial(publish, CLUSTER_GROUP, event, summary))


def _actor(user: Any) -> Any:
    return user if user is not None and user.is_authenticated else None


def _clean_reason(reason: Any) -> str:
    """The operator's words, by the rule of an operation's reason (they end up in one)."""
    if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
        raise errors.MalformedRequest(
            f"'reason' must be a text of at most {REASON_MAX_CHARS} characters"
        )
    if any((ord(c) < 32 and c not in "\t\n") or "\ud800" <= c <= "\udfff" for c in reason):
        raise errors.MalformedRequest("'reason' may not hold control characters or lone surrogates")
    return reason.strip()


# -- what the runner reports ---------------------------------------------------------------------
@transaction.atomic
def workers_record(*, pipeline: str, epoch: int, workers: list[WorkerInfo]) -> list[Worker]:
    """The runner's whole view of its workers at the barrier of ``epoch``.

    A worker seen for the first time (or again, after it was lost or removed) joins as active;
    a known worker that is missing or not alive is removed if it was being decommissioned (and
    the provider is asked to give its machine back), else lost. Safe to repeat: a report that
    changes nothing records nothing. Returns the workers of the pipeline.
    """
    try:
        target = Pipeline.objects.select_for_update().get(name=pipeline)
    except Pipeline.DoesNotExist:
        raise PipelineNotFound(f"no pipeline named {pipeline!r} has registered") from None
    now = timezone.now()
    alive = {info.name: info for info in workers if info.alive}
    known = {
        w.name: w
        for w in Worker.objects.select_for_update(of=("self",))
        .select_related("pipeline")
        .filter(Q(pipeline=target) | Q(name__in=list(alive)))
    }
    for info in alive.values():
        _worker_seen(target, known.get(info.name), info, epoch, now)
    for worker in known.values():
        if worker.name in alive or worker.pipeline_id != target.id or worker.status in GONE:
            continue
        _worker_gone(worker, epoch, now)
    return list(Worker.objects.filter(pipeline=target).select_related("pipeline"))


def _worker_seen(
    pipeline: Pipeline, worker: Worker | None, info: WorkerInfo, epoch: int, now: Any
) -> None:
    fields = {
        "pipeline": pipeline,
        "executor_id": info.executor_id[:64],
        "host": info.host[:255],
        "cores": max(info.cores, 0),
        "bootstrapped_epoch": info.bootstrapped_epoch,
        "alive": True,
        "last_seen": now,
    }
    # a join: a new worker, one that comes back after it was lost or removed, or one the
    # registered topology named and the runner reports for the first time
    if worker is None or worker.status in GONE or worker.joined_at is None:
        before = None if worker is None else worker_summary(worker)
        if worker is None:
            worker = Worker(name=info.name)
        if worker.status in GONE or worker.pk is None:
            worker.status = WorkerStatus.ACTIVE
            worker.status_reason = ""
            worker.drain_operation_id = ""
        for name, value in fields.items():
            setattr(worker, name, value)
        worker.joined_at, worker.left_at = now, None
        worker.save()
        _pus_record(worker, info.parallel_units)
        audit_record(
            actor_name="runner",
            action="worker.joined",
            obj=_object(worker),
            before=before,
            after={**worker_summary(worker), "epoch": epoch},
        )
        _announce(Event.WORKER_JOINED, worker)
        return
    was_bootstrapped = worker.bootstrapped_epoch is None or worker.bootstrapped_epoch >= 0
    changed = any(
        getattr(worker, name) != value for name, value in fields.items() if name != "last_seen"
    )
    for name, value in fields.items():
        setattr(worker, name, value)
    worker.save()
    pus_changed = _pus_record(worker, info.parallel_units)
    if not was_bootstrapped and info.bootstrapped_epoch >= 0:
        audit_record(
            actor_name="runner",
            action="worker.bootstrapped",
            obj=_object(worker),
            after={**worker_summary(worker), "epoch": epoch},
        )
    if changed or pus_changed:
        _announce(Event.WORKER_STATUS, worker)


def _pus_record(worker: Worker, numbers: tuple[int, ...]) -> bool:
    """The worker's PUs are exactly ``numbers``, active; one it no longer has was removed by the
    runner. Returns whether anything changed."""
    existing = set(ParallelUnit.objects.filter(number__in=numbers).values_list("number", flat=True))
    created = ParallelUnit.objects.bulk_create(
        [ParallelUnit(number=n, worker=worker) for n in numbers if n not in existing]
    )
    moved = (
        ParallelUnit.objects.filter(number__in=numbers)
        .exclude(worker=worker, status=ParallelUnit.Status.ACTIVE)
        .update(worker=worker, status=ParallelUnit.Status.ACTIVE)
    )
    dropped = (
        ParallelUnit.objects.filter(worker=worker, status=ParallelUnit.Status.ACTIVE)
        .exclude(number__in=numbers)
        .update(status=ParallelUnit.Status.REMOVED)
    )
    return bool(created or moved or dropped)


def _worker_gone(worker: Worker, epoch: int, now: Any) -> None:
    before = worker_summary(worker)
    worker.alive = False
    worker.left_at = now
    if worker.status == WorkerStatus.DECOMMISSIONING:
        worker.status = WorkerStatus.REMOVED
        worker.status_reason = f"decommissioned; gone from the runner's report at epoch {epoch}"
        pu_status, action, event = (
            ParallelUnit.Status.REMOVED,
            "worker.removed",
            Event.WORKER_REMOVED,
        )
        transaction.on_commit(partial(_release_later, worker.pk))
    else:
        worker.status_reason = (
            f"its executor disappeared without a drain (runner's report at epoch {epoch}); "
            f"remove its PUs from their fragments to move their vnodes to live PUs"
        )
        worker.status = WorkerStatus.LOST
        pu_status, action, event = ParallelUnit.Status.LOST, "worker.lost", Event.WORKER_LOST
    worker.save()
    ParallelUnit.objects.filter(worker=worker).exclude(status=ParallelUnit.Status.REMOVED).update(
        status=pu_status
    )
    audit_record(
        actor_name="runner",
        action=action,
        obj=_object(worker),
        before=before,
        after={**worker_summary(worker), "epoch": epoch},
    )
    _announce(event, worker)


def _release_later(worker_pk: int) -> None:
    """Give the machine back without holding up the runner's barrier (a provider's command may
    take minutes): in a thread of the process that saw the worker go, whose environment names
    the provider (``SPARK_MASTER``, ``RESCALER_WORKER_PROVIDER``)."""

    def run() -> None:
        try:
            worker_release(worker_pk=worker_pk)
        except Exception:  # the audit could not be written: the database is down
            log.exception("releasing worker %s", worker_pk)
        finally:
            connection.close()

    threading.Thread(target=run, name=f"release-worker-{worker_pk}", daemon=True).start()


def worker_release(*, worker_pk: int) -> str:
    """Ask the provider to release a removed worker's machine; the answer, or the error, goes
    into the audit (``worker.released`` / ``worker.release_failed``): it is never raised."""
    worker = Worker.objects.select_related("pipeline").get(pk=worker_pk)
    info = WorkerInfo(
        name=worker.name,
        executor_id=worker.executor_id,
        host=worker.host,
        cores=worker.cores,
        parallel_units=tuple(worker.parallel_units.values_list("number", flat=True)),
        alive=False,
        bootstrapped_epoch=worker.bootstrapped_epoch
        if worker.bootstrapped_epoch is not None
        else -1,
    )
    try:
        provider = provider_from_env()
        answer = provider.release(info)
    except Exception as exc:  # a provider's failure is recorded, never raised
        answer = f"{type(exc).__name__}: {exc}"
        audit_record(
            actor_name="control-plane",
            action="worker.release_failed",
            obj=_object(worker),
            after={"error": answer},
        )
        log.warning("worker %s: release failed: %s", worker.name, answer)
        return answer
    audit_record(
        actor_name="control-plane",
        action="worker.released",
        obj=_object(worker),
        after={"provider": provider.name, "answer": answer},
    )
    return answer


def worker_command_acked(*, command_id: int, status: str, detail: str = "") -> None:
    """A refused ``worker.decommission`` (its PUs still hold vnodes, say) puts the worker back to
    cordoned with the runner's reason, rather than leaving it decommissioning for ever."""
    if status != RunnerCommand.Status.FAILED:
        return
    command = RunnerCommand.objects.filter(
        id=command_id, kind=CommandKind.WORKER_DECOMMISSION
    ).first()
    if command is None:
        return
    with transaction.atomic():
        worker = (
            Worker.objects.select_for_update(of=("self",))
            .select_related("pipeline")
            .filter(
                name=str(command.payload.get("worker", "")), status=WorkerStatus.DECOMMISSIONING
            )
            .first()
        )
        if worker is None:
            return
        _status_set(
            worker,
            WorkerStatus.CORDONED,
            f"the runner refused to decommission it: {detail}",
            "worker.decommission_refused",
            actor_name="runner",
            command=command_id,
            detail=detail,
        )


# -- what operators ask --------------------------------------------------------------------------
def worker_get(*, name: str) -> Worker:
    """A worker by name; ``unknown_worker`` (404) if there is none."""
    worker = Worker.objects.select_related("pipeline").filter(name=name).first()
    if worker is None:
        raise UnknownWorker(f"no worker {name!r}")
    return worker


def _locked(name: str) -> Worker:
    worker = (
        Worker.objects.select_for_update(of=("self",))
        .select_related("pipeline")
        .filter(name=name)
        .first()
    )
    if worker is None:
        raise UnknownWorker(f"no worker {name!r}")
    return worker


def _conflict(worker: Worker, action: str, hint: str = "") -> WorkerStatusConflict:
    reason = f" ({worker.status_reason})" if worker.status_reason else ""
    return WorkerStatusConflict(
        f"cannot {action} worker {worker.name!r}: it is {worker.status}{reason}"
        + (f"; {hint}" if hint else "")
    )


def _status_set(
    worker: Worker,
    status: WorkerStatus,
    status_reason: str,
    action: str,
    *,
    user: Any = None,
    actor_name: str = "",
    **after: Any,
) -> Worker:
    """One change of a worker's status: saved, audited (``after``: what the event adds to the
    worker's summary) and announced once committed."""
    before = worker_summary(worker)
    worker.status = status
    worker.status_reason = status_reason[:600]
    worker.save(update_fields=["status", "status_reason"])
    audit_record(
        actor=_actor(user),
        actor_name=actor_name,
        action=action,
        obj=_object(worker),
        before=before,
        after={**worker_summary(worker), **after},
    )
    _announce(Event.WORKER_STATUS, worker)
    return worker


@transaction.atomic
def worker_cordon(*, user: Any, name: str, reason: str = "") -> Worker:
    """No new vnodes go to the worker; it keeps what it has. Cordoning a cordoned worker
    changes nothing (and records nothing)."""
    reason = _clean_reason(reason)
    worker = _locked(name)
    if worker.status == WorkerStatus.CORDONED:
        return worker
    if worker.status != WorkerStatus.ACTIVE:
        raise _conflict(worker, "cordon", "only an active worker can be cordoned")
    return _status_set(
        worker, WorkerStatus.CORDONED, reason, "worker.cordoned", user=user, reason=reason
    )


@transaction.atomic
def worker_uncordon(*, user: Any, name: str, reason: str = "") -> Worker:
    """A cordoned worker takes vnodes again. Uncordoning an active worker changes nothing."""
    reason = _clean_reason(reason)
    worker = _locked(name)
    if worker.status == WorkerStatus.ACTIVE:
        return worker
    if worker.status != WorkerStatus.CORDONED:
        hint = (
            f"cancel its drain operation {worker.drain_operation_id} first: it goes back to "
            f"cordoned when the operation ends"
            if worker.status == WorkerStatus.DRAINING
            else "only a cordoned worker can be uncordoned"
        )
        raise _conflict(worker, "uncordon", hint)
    return _status_set(
        worker, WorkerStatus.ACTIVE, reason, "worker.uncordoned", user=user, reason=reason
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
def worker_drain(*, user: Any, name: str, reason: str = "", granularity: Any = None) -> WorkerDrain:
    """Cordon the worker and start the live operation that moves every vnode off it; when that
    operation completes the worker is decommissioned (``worker_drain_settled``). A worker whose
    PUs run no stateful fragment is decommissioned at once. All or nothing: a refused request
    (a fragment busy, one left without a PU) leaves the worker as it was."""
    reason = _clean_reason(reason)
    if granularity is not None:
        Granularity.parse(granularity)  # a malformed one is refused before anything is locked
    worker = _locked(name)
    if worker.status not in (WorkerStatus.ACTIVE, WorkerStatus.CORDONED):
        hint = {
            WorkerStatus.DRAINING: f"its drain operation {worker.drain_operation_id} is in progress",
            WorkerStatus.LOST: "move its vnodes with a request that removes its PUs",
        }.get(WorkerStatus(worker.status), "")
        raise _conflict(worker, "drain", hint)
    before = worker_summary(worker)
    # cordoned first: the operation's planner gives none of the worker's PUs anything
    worker.status = WorkerStatus.CORDONED
    worker.save(update_fields=["status"])
    request = drain_request(worker, reason=reason, granularity=granularity)
    if request is None:
        _decommission(
            worker,
            user=user,
            reason=reason or "drained: no stateful fragment ran on it",
            before=before,
        )
        return WorkerDrain(worker, None)
    operation = operation_request(user=user, body=request)
    assert isinstance(operation, RescaleOperation)  # never a dry run
    worker.status = WorkerStatus.DRAINING
    worker.status_reason = reason
    worker.drain_operation_id = operation.operation_id
    worker.save(update_fields=["status", "status_reason", "drain_operation_id"])
    audit_record(
        actor=_actor(user),
        action="worker.draining",
        obj=_object(worker),
        before=before,
        after={
            **worker_summary(worker),
            "reason": reason,
            "operation_id": operation.operation_id,
            "changes": {n: c.to_json() for n, c in request.changes.items()},
        },
    )
    _announce(Event.WORKER_STATUS, worker)
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
    command = command_submit(
        pipeline=worker.pipeline.name,
        kind=CommandKind.WORKER_DECOMMISSION,
        payload={"worker": worker.name},
        user=_actor(user),
    )
    worker.status = WorkerStatus.DECOMMISSIONING
    worker.status_reason = reason[:600]
    worker.save(update_fields=["status", "status_reason"])
    audit_record(
        actor=_actor(user),
        actor_name=actor_name,
        action="worker.decommissioning",
        obj=_object(worker),
        before=before,
        after={**worker_summary(worker), "command": command.id},
    )
    _announce(Event.WORKER_STATUS, worker)


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
    return _status_set(
        worker,
        WorkerStatus.CORDONED,
        f"drain operation {operation.operation_id} {operation.status}: {operation.outcome}",
        "worker.drain_failed",
        actor_name="orchestrator",
        operation_id=operation.operation_id,
    )


@dataclass(frozen=True)
class WorkerAdded:
    """The provider's answer to "one more worker": it joins by itself a few seconds later."""

    provider: str
    cores: int
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {"provider": self.provider, "cores": self.cores, "answer": self.answer}


def cores_parse(value: Any) -> int:
    """A worker's cores as the API and the CLI take them."""
    if isinstance(value, bool) or not isinstance(value, int) or not CORES_MIN <= value <= CORES_MAX:
        raise errors.MalformedRequest(
            f"'cores' must be an integer from {CORES_MIN} to {CORES_MAX}, not {value!r}"
        )
    return value


def worker_add(*, user: Any, cores: int = 1) -> WorkerAdded:
    """Ask the worker provider for one more worker (``workers.provider``); audited with the
    provider's answer. A provider that cannot (none configured, its command failed) is a
    ``worker_provider_refused`` refusal with its reason, and records nothing."""
    cores = cores_parse(cores)
    try:
        provider = provider_from_env()
        answer = provider.add(cores)
    except ProviderError as exc:
        raise ProviderRefused(f"cannot add a worker: {exc}") from exc
    added = WorkerAdded(provider=provider.name, cores=cores, answer=answer)
    audit_record(
        actor=_actor(user),
        action="worker.add_requested",
        obj=(AuditObject.WORKER, f"provider:{provider.name}"),
        after=added.to_json(),
    )
    return added
