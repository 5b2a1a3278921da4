"""Services of rescale operations, without HTTP or Celery (Postgres via pytest-django)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import OperationalError
from django.utils import timezone

from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Pipeline, RunnerCommand
from rescaler.operations import drive
from rescaler.operations import requests as operation_requests
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.errors import OperationFinal
from rescaler.operations.models import (
    OperationFragment,
    OperationPlan,
    RescaleOperation,
    RescaleStep,
)
from rescaler.operations.progress import operation_progress_record
from rescaler.operations.requests import operation_request
from rescaler.operations.tasks import drive_operation, resume_operations, watch_operation
from workers.control import Topology
from workers.pipeline.placement import VnodeMapping
from workers.rescale import errors
from workers.rescale.protocol import (
    CommandKind,
    OperationProgress,
    OperationStatus,
    Plan,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    queued: list[int] = []
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", queued.append)
    return queued


@pytest.fixture
def cluster() -> Pipeline:
    placement = VnodeMapping.initial("word_count", 16, [0, 1])
    topology = Topology(
        pipeline="wordcount",
        workers={"local-0": [0, 1, 2, 3]},
        fragments={
            "source": {"kind": "source", "parallel_units": [0, 1]},
            "word_count": {
                "kind": "stateful",
                "region": 1,
                "vnodes": 16,
                "key": "word",
                "operator": "count",
                "parallel_units": [0, 1],
                "mapping": list(placement.mapping),
                "version": 1,
            },
            "sink": {"kind": "sink", "parallel_units": [0, 1]},
        },
        spark={"alive": True},
    )
    pipeline = cluster_services.topology_register(topology=topology)
    cluster_services.runner_heartbeat(
        pipeline="wordcount", epoch=3, status="running", spark={"alive": True}
    )
    return Pipeline.objects.get(pk=pipeline.pk)


@pytest.fixture
def user() -> Any:
    return get_user_model().objects.create_user("operator", password="x")


def body(**change: Any) -> dict[str, Any]:
    return {"changes": {"word_count": change}, "granularity": {"vnodes_per_step": 2}}


def test_dry_run_returns_the_plan_and_creates_nothing(cluster: Pipeline, user: Any) -> None:
    stored = operation_request(
        user=user, body={**body(added_parallel_units=[2, 3]), "dry_run": True}
    )
    assert isinstance(stored, OperationPlan), "a dry run keeps its plan under a plan_id"
    assert stored.requested_by == user and stored.mapping_versions == {"word_count": 1}
    plan = stored.plan_record()
    assert isinstance(plan, Plan) and plan.summary_json() == stored.plan
    assert len(plan.steps) == 4 and len(plan.fragments["word_count"].moves) == 8
    data = plan.to_json()["fragments"]["word_count"]
    assert data["vnodes_moved"] == 8
    assert data["balance_after"]["vnodes_per_pu"] == {"0": 4, "1": 4, "2": 4, "3": 4}
    assert RescaleOperation.objects.count() == 0


def test_an_operation_read_without_its_plan_reads_it_for_its_record_and_keeps_none(
    cluster: Pipeline, user: Any
) -> None:
    """The drive loop holds the operation it drives without its plan (``defer("plan")``): the
    record reads it, the same as from a whole operation, and leaves the instance without it
    (its decoded JSON would be walked by every full collection while the operation is held)."""
    op = operation_request(user=user, body=body(added_parallel_units=[2, 3]))
    assert isinstance(op, RescaleOperation)
    whole = RescaleOperation.objects.get(pk=op.pk).plan_record()
    held = RescaleOperation.objects.select_related("pipeline").defer("plan").get(pk=op.pk)
    assert held.plan_record() == whole and len(whole.steps) == 4
    assert "plan" in held.get_deferred_fields()


def test_request_creates_operation_steps_lock_and_audit_and_queues_the_driver(
    cluster: Pipeline, user: Any, _no_celery: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        op = operation_request(user=user, body=body(added_parallel_units=[2, 3]))
    assert isinstance(op, RescaleOperation)
    assert op.status == "pending" and op.requested_by == user
    assert RescaleStep.objects.filter(operation=op).count() == 4
    assert _no_celery == [op.id], "the driver is queued after the commit"
    event = AuditEvent.objects.get(action="operation.requested")
    assert event.actor == user and event.object_id == op.operation_id


@pytest.mark.parametrize("analyzed_at", [4, 5])
def test_a_large_operation_s_steps_are_analyzed_once_stored(
    cluster: Pipeline,
    user: Any,
    analyzed_at: int,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """From ``ANALYZE_STEPS_AT`` steps, a new operation's rows are a bulk load: the planner's
    statistics of the steps table are refreshed once they are committed (else it counts the
    operation's steps as a handful until autovacuum comes by, and sorts where it would hash);
    below it nothing more runs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(operation_requests, "ANALYZE_STEPS_AT", analyzed_at)
    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks(execute=True),
    ):
        op = operation_request(user=user, body=body(added_parallel_units=[2, 3]))
    assert RescaleStep.objects.filter(operation=op).count() == 4
    analyzed = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("ANALYZE")]
    if analyzed_at > 4:
        assert analyzed == []
        return
    assert analyzed == [f'ANALYZE "{RescaleStep._meta.db_table}"']
    with connection.cursor() as cursor:  # what the planner now reads of the table
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE relname = %s", [RescaleStep._meta.db_table]
        )
        assert cursor.fetchone()[0] >= 4


def test_statistics_that_cannot_be_refreshed_never_keep_the_driver_from_being_queued(
    cluster: Pipeline,
    user: Any,
    _no_celery: list[int],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The ANALYZE after a large operation's steps is a planner's nicety: if it fails (its lock
    not granted within its timeout, say), the operation is stored and its driver queued all
    the same."""

    def refused() -> None:
        raise OperationalError("canceling statement due to lock timeout")

    monkeypatch.setattr(operation_requests, "ANALYZE_STEPS_AT", 1)
    monkeypatch.setattr(operation_requests, "steps_analyze", refused)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        op = operation_request(user=user, body=body(added_parallel_units=[2, 3]))
    assert refused in callbacks
    assert isinstance(op, RescaleOperation) and _no_celery == [op.id]


def test_a_second_operation_on_a_busy_fragment_is_refused(cluster: Pipeline, user: Any) -> None:
    operation_request(user=user, body=body(added_parallel_units=[2]))
    with pytest.raises(errors.FragmentBusy, match="still in progress"):
        operation_request(user=user, body=body(added_parallel_units=[3]))
    assert OperationFragment.objects.filter(active=True).count() == 1


@pytest.mark.parametrize(
    ("request_body", "error"),
    [
        ({"changes": {"nope": {"added_parallel_units": [2]}}}, errors.UnknownFragment),
        ({"changes": {"source": {"added_parallel_units": [2]}}}, errors.NotStateful),
        (body(added_parallel_units=[7]), errors.UnknownParallelUnit),
        (body(removed_parallel_units=[0, 1]), errors.RemovesEveryUnit),
        (body(added_parallel_units=["2"]), errors.MalformedRequest),
        ({"changes": {}}, errors.MalformedRequest),
        (body(added_parallel_units=[2], removed_parallel_units=[2]), errors.AddedAndRemoved),
    ],
)
def test_invalid_requests_are_refused_before_anything_moves(
    cluster: Pipeline, user: Any, request_body: Any, error: type
) -> None:
    with pytest.raises(error):
        operation_request(user=user, body=request_body)
    assert RescaleOperation.objects.count() == 0


def test_added_pu_on_a_dead_worker_is_refused(cluster: Pipeline, user: Any) -> None:
    Pipeline.objects.filter(pk=cluster.pk).update(
        heartbeat_at=timezone.now() - timezone.timedelta(hours=1)
    )
    with pytest.raises(errors.DeadWorker, match="not alive"):
        operation_request(user=user, body=body(added_parallel_units=[2]))


def test_cancel_before_the_runner_began_ends_it_without_moving_anything(
    cluster: Pipeline, user: Any
) -> None:
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    operation_cancel(user=user, operation=op)
    assert drive.operation_drive(pk=op.id, budget_s=1) == "cancelled"
    op.refresh_from_db()
    assert op.status == "cancelled" and op.finished_at is not None
    assert not OperationFragment.objects.filter(active=True).exists(), "the fragment is free again"
    with pytest.raises(OperationFinal):
        operation_cancel(user=user, operation=op)
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor_name"))
    assert ("operation.cancel_requested", "operator") in actions
    assert ("operation.cancelled", "orchestrator") in actions


def test_a_cancel_after_the_begin_was_sent_waits_for_the_runner_even_before_its_first_report(
    cluster: Pipeline, user: Any
) -> None:
    """The quiet 30-minute soak's one failed operation (issue 24): a driver sent the begin, the
    runner took it but had not reported yet, a cancel came, and the next driver ended the
    operation "cancelled before it started". The fragment was free in the control plane and
    busy on the runner, so the next operation's begin was refused."""
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    assert RunnerCommand.objects.filter(kind="operation.begin").exists()
    operation_cancel(user=user, operation=op)
    cancels = RunnerCommand.objects.filter(kind="operation.cancel")
    assert cancels.count() == 1, "the runner may hold it: it is told at once, after the begin"
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    op.refresh_from_db()
    assert op.status == "cancelling", "final only when the runner says so"
    assert OperationFragment.objects.filter(operation=op, active=True).exists()
    # the runner applies the begin, then the cancel, and reports the operation cancelled
    final = {**report_of(op), "status": OperationStatus.CANCELLED, "cancel_requested": True}
    operation_progress_record(pipeline="wordcount", progress=final)
    assert drive.operation_drive(pk=op.id, budget_s=1, poll_s=0.05) == "cancelled"
    assert not OperationFragment.objects.filter(active=True).exists(), "the fragment is free again"


def test_a_cancel_after_the_runner_refused_the_begin_ends_at_once(
    cluster: Pipeline, user: Any
) -> None:
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    RunnerCommand.objects.filter(kind="operation.begin").update(status="failed", detail="no PU 2")
    operation_cancel(user=user, operation=op)
    assert drive.operation_drive(pk=op.id, budget_s=1) in ("cancelled", "failed")
    op.refresh_from_db()
    assert op.is_final and not OperationFragment.objects.filter(active=True).exists()


def report_of(op: RescaleOperation) -> dict[str, Any]:
    """A running operation's progress report, as the runner sends it (without steps)."""
    return OperationProgress(
        operation_id=op.operation_id,
        strategy=Strategy(op.strategy),
        fragments=tuple(op.fragments),
        status=OperationStatus.RUNNING,
        phase=StopStartPhase.BEGUN,
    ).to_json()


def step_report(
    op: RescaleOperation, number: int, phase: str, timings: dict[str, float]
) -> dict[str, Any]:
    spec = op.steps.get(step=number).spec()
    return StepProgress(
        step=number,
        fragment=spec.fragment,
        source_pu=spec.source_pu,
        target_pu=spec.target_pu,
        vnodes=spec.vnodes,
        phase=StepPhase(phase),
        timings=timings,
    ).to_json()


def test_driver_begins_issues_steps_and_records_runner_progress(
    cluster: Pipeline, user: Any
) -> None:
    op = operation_request(user=user, body=body(added_parallel_units=[2, 3]))
    assert isinstance(op, RescaleOperation)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    kinds = list(RunnerCommand.objects.order_by("id").values_list("kind", flat=True))
    assert kinds[0] == "operation.begin"
    progress = {
        **report_of(op),
        "vnodes_moved": 2,
        "keys_moved": 10,
        "bytes_moved": 100,
        "steps": [step_report(op, 1, "done", {"done": time.time()})],
    }
    operation_progress_record(pipeline="wordcount", progress=progress)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    assert "operation.step" in RunnerCommand.objects.values_list("kind", flat=True)
    step = RescaleStep.objects.get(operation=op, step=1)
    assert step.phase == "done"
    event = AuditEvent.objects.get(action="step.done")
    assert event.actor_name == "runner" and event.before == {"phase": "planned"}


def test_a_stuck_step_cancels_through_the_audited_cancel_with_the_orchestrator_as_actor(
    cluster: Pipeline, user: Any, settings: Any
) -> None:
    """The step-timeout watchdog cancels the way a user does: one service, one audit event."""
    settings.RESCALER_STEP_TIMEOUT_S = 1
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    progress = {
        **report_of(op),
        "steps": [step_report(op, 1, "collecting", {"collecting": time.time() - 60})],
    }
    operation_progress_record(pipeline="wordcount", progress=progress)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    op.refresh_from_db()
    assert op.status == "cancelling" and op.cancel_requested_by is None
    assert "stuck in phase 'collecting'" in op.outcome
    event = AuditEvent.objects.get(action="operation.cancel_requested")
    assert event.actor is None and event.actor_name == "orchestrator"
    assert event.before["status"] == "running" and event.after["status"] == "cancelling"
    assert event.after["reason"] == op.outcome
    # a user cancelling now finds it cancelling already: harmless, nothing more recorded
    operation_cancel(user=user, operation=op)
    assert AuditEvent.objects.filter(action="operation.cancel_requested").count() == 1


def test_an_operation_the_runner_cancelled_for_a_refused_step_ends_saying_why(
    cluster: Pipeline, user: Any
) -> None:
    """A step refused mid-operation (its target PU's worker lost) cancels it in the runner,
    with the reason (workers/rescale/commands.py): the operation ends cancelled, its outcome
    the runner's reason, its error code ``runner_refused`` (not a step time-out)."""
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    reason = "step 1: target PU 2 does not exist; the operation was cancelled: request it again"
    progress = {
        **report_of(op),
        "status": "cancelled",
        "cancel_requested": True,
        "error": reason,
    }
    operation_progress_record(pipeline="wordcount", progress=progress)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "cancelled"
    op.refresh_from_db()
    assert op.status == "cancelled" and op.error_code == "runner_refused"
    assert reason in op.outcome


def test_a_live_lease_keeps_a_second_driver_out(cluster: Pipeline, user: Any) -> None:
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    assert drive._take_lease(op.id, "first", 30)
    assert drive.operation_drive(pk=op.id, budget_s=0.1) == "leased"
    RescaleOperation.objects.filter(pk=op.pk).update(
        lease_until=timezone.now() - timezone.timedelta(seconds=1)
    )
    assert drive.operation_watch(op.id) == drive.Watch.ORPHANED
    assert drive.unfinished_operations() == [op.id]


def test_the_watchdog_queues_a_driver_once_the_lease_expired_and_watches_until_the_end(
    cluster: Pipeline, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog is per operation: a moment without unfinished operations cannot stop it, as
    it stopped the one resume chain for all of them (the soak's operation left running)."""
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    drivers: list[int] = []
    watches: list[tuple[int, float]] = []
    monkeypatch.setattr(drive_operation, "delay", drivers.append)
    monkeypatch.setattr(
        watch_operation, "apply_async", lambda args, countdown: watches.append((args[0], countdown))
    )
    assert drive._take_lease(op.id, "drive:alive", 30)
    assert watch_operation(op.id) == "driven" and drivers == [] and len(watches) == 1

    RescaleOperation.objects.filter(pk=op.pk).update(
        lease_until=timezone.now() - timezone.timedelta(seconds=1)
    )
    assert watch_operation(op.id) == "orphaned" and drivers == [op.id] and len(watches) == 2

    RescaleOperation.objects.filter(pk=op.pk).update(status=OperationStatus.COMPLETED)
    assert watch_operation(op.id) == "final" and drivers == [op.id] and len(watches) == 2


def test_a_worker_that_connects_starts_a_watchdog_for_every_unfinished_operation(
    cluster: Pipeline, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    watched: list[int] = []
    monkeypatch.setattr(watch_operation, "delay", watched.append)
    assert resume_operations() == [op.id] and watched == [op.id]


def test_a_driver_that_failed_holding_the_lease_takes_it_back_when_it_runs_again(
    cluster: Pipeline, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Postgres restarting under a driver fails its run with the lease taken; Celery runs it again
    (same task, same owner). Before, the new run was a new owner, found the lease taken, returned
    "leased" and re-queued nothing: the operation stayed running with no driver (the soak's
    operation left running, issue 24)."""
    op = operation_request(user=user, body=body(added_parallel_units=[2]))
    assert isinstance(op, RescaleOperation)
    real_tick = drive.orchestrator_tick

    def postgres_restarting(orchestrator: Any) -> Any:
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(drive, "orchestrator_tick", postgres_restarting)
    with pytest.raises(OperationalError):
        drive.operation_drive(pk=op.id, owner="drive:task-1", budget_s=0.3, poll_s=0.05)
    assert RescaleOperation.objects.get(pk=op.pk).lease_owner == "drive:task-1"

    monkeypatch.setattr(drive, "orchestrator_tick", real_tick)
    assert drive.operation_drive(pk=op.id, owner="drive:task-2", budget_s=0.1) == "leased"
    assert drive.operation_drive(pk=op.id, owner="drive:task-1", budget_s=0.3) == "continue"
    assert RunnerCommand.objects.filter(kind=CommandKind.OPERATION_BEGIN).exists()


def test_the_drive_task_drives_as_its_own_id_which_its_retries_keep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owners: list[str] = []

    def record(*, pk: int, owner: str = "") -> str:
        owners.append(owner)
        return "leased"

    monkeypatch.setattr(drive, "operation_drive", record)
    drive_operation.apply(args=(1,), task_id="3f2c")
    assert owners == ["drive:3f2c"]


def test_audit_log_is_append_only(cluster: Pipeline, user: Any) -> None:
    event = audit_record(actor=user, action="x", obj=("t", "1"))
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.update(action="y")


def test_re_registering_the_topology_keeps_the_runner_alive(cluster: Pipeline, user: Any) -> None:
    """The runner re-registers when a rescale changes placements; a request arriving just then
    must not see the runner as dead."""
    placement = VnodeMapping.initial("word_count", 16, [0, 1, 2])
    topology = Topology(
        pipeline="wordcount",
        workers={"local-0": [0, 1, 2, 3]},
        fragments={
            "word_count": {
                "kind": "stateful",
                "vnodes": 16,
                "parallel_units": [0, 1, 2],
                "mapping": list(placement.mapping),
                "version": 2,
            }
        },
        spark={"alive": True},
    )
    cluster_services.topology_register(topology=topology)
    assert Pipeline.objects.get(pk=cluster.pk).status == "running"
    plan = operation_request(user=user, body={**body(added_parallel_units=[3]), "dry_run": True})
    assert isinstance(plan, OperationPlan)
