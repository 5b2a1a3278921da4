"""Elastic workers, the control plane's services (rescaler/runner/workers/), without HTTP,
Celery or Spark: what the runner's worker reports do, and what operators ask."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from rescaler.audit.models import AuditEvent
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import ParallelUnit, Pipeline, RunnerCommand, Worker
from rescaler.operations import drive
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.runner import control
from rescaler.runner.control import OrmControl
from rescaler.runner.workers import (
    DrainEmptiesFragment,
    ProviderRefused,
    UnknownWorker,
    WorkerStatusConflict,
    worker_add,
    worker_cordon,
    worker_drain,
    worker_release,
    worker_uncordon,
    workers_record,
)
from rescaler.runner.workers import machines as worker_machines
from rescaler.runner.workers import tasks as worker_tasks
from workers.control import Topology, WorkerInfo
from workers.pipeline.placement import VnodeMapping
from workers.provider import ProviderError
from workers.rescale import errors

pytestmark = pytest.mark.django_db

PIPELINE = "wordcount"


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    queued: list[int] = []
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", queued.append)
    return queued


@pytest.fixture(autouse=True)
def _keep_the_test_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """OrmControl refreshes old connections first: in a test that would close the test's own."""
    monkeypatch.setattr(control, "close_old_connections", lambda: None)


@pytest.fixture(autouse=True)
def released(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Releases are recorded, never run in a thread (the test's transaction is never committed)."""
    calls: list[int] = []
    monkeypatch.setattr(worker_tasks, "release_later", calls.append)
    return calls


def info(name: str, pus: tuple[int, ...], *, alive: bool = True, boot: int = 0) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        executor_id=name.removeprefix("w"),
        host=f"host-{name}",
        cores=len(pus),
        parallel_units=pus,
        alive=alive,
        bootstrapped_epoch=boot,
    )


W1, W2 = info("w1", (0, 1)), info("w2", (2, 3))


@pytest.fixture
def cluster() -> Pipeline:
    """word_count on PUs 0, 1 (worker w1) and 2 (worker w2); PU 3 (w2) runs nothing."""
    placement = VnodeMapping.initial("word_count", 12, [0, 1, 2])
    cluster_services.topology_register(
        topology=Topology(
            pipeline=PIPELINE,
            workers={"w1": [0, 1], "w2": [2, 3]},
            fragments={
                "source": {"kind": "source", "parallel_units": [0, 1, 2]},
                "word_count": {
                    "kind": "stateful",
                    "vnodes": 12,
                    "parallel_units": [0, 1, 2],
                    "mapping": list(placement.mapping),
                    "version": 1,
                },
                "sink": {"kind": "sink", "parallel_units": [0, 1, 2]},
            },
            spark={"alive": True},
        )
    )
    workers_record(pipeline=PIPELINE, epoch=0, workers=[W1, W2])
    cluster_services.runner_heartbeat(
        pipeline=PIPELINE, epoch=0, status="running", spark={"alive": True}
    )
    return Pipeline.objects.get(name=PIPELINE)


@pytest.fixture
def user() -> Any:
    return get_user_model().objects.create_user("operator", password="x")


def worker(name: str) -> Worker:
    return Worker.objects.get(name=name)


def pu_status(*numbers: int) -> list[str]:
    return [ParallelUnit.objects.get(number=n).status for n in numbers]


def actions(name: str) -> list[str]:
    return list(
        AuditEvent.objects.filter(object_type="worker", object_id=name)
        .order_by("id")
        .values_list("action", flat=True)
    )


# -- the runner's reports ------------------------------------------------------------------------
def test_a_reported_worker_is_recorded_with_its_executor(cluster: Pipeline) -> None:
    w2 = worker("w2")
    assert (w2.status, w2.executor_id, w2.host, w2.cores) == ("active", "2", "host-w2", 2)
    assert w2.bootstrapped_epoch == 0 and w2.alive and w2.joined_at is not None
    assert sorted(w2.parallel_units.values_list("number", flat=True)) == [2, 3]


def test_a_new_worker_joins_active_with_its_pus(cluster: Pipeline) -> None:
    w3 = info("w3", (4, 5), boot=-1)
    workers_record(pipeline=PIPELINE, epoch=5, workers=[W1, W2, w3])
    row = worker("w3")
    assert row.status == "active" and row.bootstrapped_epoch == -1
    assert pu_status(4, 5) == ["active", "active"]
    assert actions("w3") == ["worker.joined"]
    joined = AuditEvent.objects.get(object_id="w3")
    assert joined.actor_name == "runner" and joined.after["epoch"] == 5
    # bootstrapped at the next barrier: audited once
    workers_record(pipeline=PIPELINE, epoch=6, workers=[W1, W2, info("w3", (4, 5), boot=6)])
    workers_record(pipeline=PIPELINE, epoch=7, workers=[W1, W2, info("w3", (4, 5), boot=6)])
    assert worker("w3").bootstrapped_epoch == 6
    assert actions("w3") == ["worker.joined", "worker.bootstrapped"]


def test_a_worker_missing_from_the_report_is_lost_with_its_pus(cluster: Pipeline) -> None:
    workers_record(pipeline=PIPELINE, epoch=9, workers=[W1])
    w2 = worker("w2")
    assert w2.status == "lost" and not w2.alive and w2.left_at is not None
    assert "epoch 9" in w2.status_reason
    assert pu_status(2, 3) == ["lost", "lost"]
    assert actions("w2") == ["worker.joined", "worker.lost"]


def test_a_lost_workers_pus_that_the_runner_gave_a_live_worker_are_its_own(
    cluster: Pipeline,
) -> None:
    """The runner gives a lost worker's PUs to live workers (workers.membership): they stay
    active, on their new worker, and the move is audited; the lost worker keeps none."""
    workers_record(
        pipeline=PIPELINE,
        epoch=9,
        workers=[info("w1", (0, 1, 2, 3)), info("w2", (), alive=False)],
    )
    w2 = worker("w2")
    assert w2.status == "lost" and "went to live workers" in w2.status_reason
    assert pu_status(2, 3) == ["active", "active"]
    assert sorted(worker("w1").parallel_units.values_list("number", flat=True)) == [0, 1, 2, 3]
    assert actions("w1") == ["worker.joined", "worker.adopted"]
    adopted = AuditEvent.objects.get(object_id="w1", action="worker.adopted")
    assert adopted.after["adopted"] == {"2": "w2", "3": "w2"} and adopted.after["epoch"] == 9
    assert adopted.before["parallel_units"] == [0, 1]
    assert actions("w2") == ["worker.joined", "worker.lost"]


def test_a_worker_reported_not_alive_is_lost_too(cluster: Pipeline) -> None:
    workers_record(pipeline=PIPELINE, epoch=9, workers=[W1, info("w2", (2, 3), alive=False)])
    assert worker("w2").status == "lost"


def test_a_repeated_report_records_nothing_more(cluster: Pipeline) -> None:
    for _ in range(3):
        workers_record(pipeline=PIPELINE, epoch=9, workers=[W1])
    assert actions("w2") == ["worker.joined", "worker.lost"]
    assert actions("w1") == ["worker.joined"]


def test_neither_a_heartbeat_nor_a_registration_revives_a_lost_worker(cluster: Pipeline) -> None:
    workers_record(pipeline=PIPELINE, epoch=9, workers=[W1])
    cluster_services.runner_heartbeat(
        pipeline=PIPELINE, epoch=10, status="running", spark={"alive": True}
    )
    cluster_services.topology_register(
        topology=Topology(
            pipeline=PIPELINE, workers={"w1": [0, 1], "w2": [2, 3]}, fragments={}, spark={}
        )
    )
    w2 = worker("w2")
    assert w2.status == "lost" and not w2.alive
    assert worker("w1").alive


def test_a_lost_worker_that_comes_back_joins_again(cluster: Pipeline) -> None:
    workers_record(pipeline=PIPELINE, epoch=9, workers=[W1])
    workers_record(pipeline=PIPELINE, epoch=12, workers=[W1, info("w2", (2, 3), boot=12)])
    w2 = worker("w2")
    assert w2.status == "active" and w2.alive and w2.left_at is None
    assert pu_status(2, 3) == ["active", "active"]
    assert actions("w2") == ["worker.joined", "worker.lost", "worker.joined"]


def test_the_orm_control_records_a_report(cluster: Pipeline) -> None:
    OrmControl().report_workers(PIPELINE, 9, [W1])
    assert worker("w2").status == "lost"


# -- cordon, uncordon ----------------------------------------------------------------------------
def test_cordon_and_uncordon_are_audited_with_the_reason(cluster: Pipeline, user: Any) -> None:
    worker_cordon(user=user, name="w2", reason="kernel upgrade")
    assert worker("w2").status == "cordoned"
    worker_cordon(user=user, name="w2", reason="again")  # already cordoned: nothing recorded
    worker_uncordon(user=user, name="w2")
    assert worker("w2").status == "active"
    assert actions("w2") == ["worker.joined", "worker.cordoned", "worker.uncordoned"]
    cordoned = AuditEvent.objects.get(action="worker.cordoned")
    assert cordoned.actor == user and cordoned.after["reason"] == "kernel upgrade"
    assert cordoned.before["status"] == "active" and cordoned.after["status"] == "cordoned"


def test_a_cordoned_workers_pus_take_no_new_vnodes(cluster: Pipeline, user: Any) -> None:
    worker_cordon(user=user, name="w2")
    with pytest.raises(errors.WorkerNotActive, match="cordoned"):
        operation_request(
            user=user, body={"changes": {"word_count": {"added_parallel_units": [3]}}}
        )
    # removing one of w1's PUs: its vnodes go to w1's other PU, none to the cordoned PU 2
    op = operation_request(
        user=user, body={"changes": {"word_count": {"removed_parallel_units": [0]}}}
    )
    assert isinstance(op, RescaleOperation)
    assert {s.target_pu for s in op.steps.all()} == {1}


def test_adding_a_pu_of_a_lost_or_unbootstrapped_worker_is_refused(
    cluster: Pipeline, user: Any
) -> None:
    workers_record(pipeline=PIPELINE, epoch=9, workers=[W1, info("w3", (4, 5), boot=-1)])
    add = {"changes": {"word_count": {"added_parallel_units": [3]}}}
    with pytest.raises(errors.ParallelUnitLost):
        operation_request(user=user, body=add)
    add = {"changes": {"word_count": {"added_parallel_units": [4]}}}
    with pytest.raises(errors.WorkerNotBootstrapped):
        operation_request(user=user, body=add)
    # the lost PU 2's vnodes move to a live PU: removing it is accepted
    op = operation_request(
        user=user, body={"changes": {"word_count": {"removed_parallel_units": [2]}}}
    )
    assert {s.source_pu for s in op.steps.all()} == {2}


@pytest.mark.parametrize("status", ["draining", "decommissioning", "removed", "lost"])
def test_cordon_is_refused_unless_active(cluster: Pipeline, user: Any, status: str) -> None:
    Worker.objects.filter(name="w2").update(status=status)
    with pytest.raises(WorkerStatusConflict, match=f"it is {status}"):
        worker_cordon(user=user, name="w2")


def test_uncordon_of_a_draining_worker_says_to_cancel_the_drain(
    cluster: Pipeline, user: Any
) -> None:
    drain = worker_drain(user=user, name="w2")
    assert drain.operation is not None
    with pytest.raises(
        WorkerStatusConflict, match=f"cancel its drain operation {drain.operation.operation_id}"
    ):
        worker_uncordon(user=user, name="w2")


def test_an_unknown_worker_is_refused(cluster: Pipeline, user: Any) -> None:
    for action in (worker_cordon, worker_uncordon, worker_drain):
        with pytest.raises(UnknownWorker, match="no worker 'nope'"):
            action(user=user, name="nope")


def test_a_malformed_reason_is_refused(cluster: Pipeline, user: Any) -> None:
    with pytest.raises(errors.MalformedRequest, match="reason"):
        worker_cordon(user=user, name="w2", reason="x" * 501)
    with pytest.raises(errors.MalformedRequest, match="control characters"):
        worker_cordon(user=user, name="w2", reason="a\x07b")
    assert worker("w2").status == "active"


# -- drain ---------------------------------------------------------------------------------------
def test_drain_starts_one_operation_removing_exactly_the_workers_pus(
    cluster: Pipeline, user: Any
) -> None:
    drain = worker_drain(user=user, name="w2", reason="scale down")
    op = drain.operation
    assert isinstance(op, RescaleOperation)
    assert RescaleOperation.objects.count() == 1
    assert op.changes == {"word_count": {"added_parallel_units": [], "removed_parallel_units": [2]}}
    assert op.strategy == "live" and op.requested_by == user
    assert op.reason == "drain worker w2: scale down"
    assert {s.source_pu for s in op.steps.all()} == {2}
    assert {s.target_pu for s in op.steps.all()} <= {0, 1}
    w2 = worker("w2")
    assert w2.status == "draining" and w2.drain_operation_id == op.operation_id
    assert actions("w2") == ["worker.joined", "worker.draining"]
    draining = AuditEvent.objects.get(action="worker.draining")
    assert (
        draining.before["status"] == "active" and draining.after["operation_id"] == op.operation_id
    )
    assert AuditEvent.objects.filter(action="operation.requested", actor=user).count() == 1


def test_a_drain_takes_a_granularity(cluster: Pipeline, user: Any) -> None:
    drain = worker_drain(user=user, name="w2", granularity="all_at_once")
    assert drain.operation is not None
    assert drain.operation.granularity["vnodes_per_step"] == 1 << 16
    with pytest.raises(errors.MalformedRequest):
        worker_drain(user=user, name="w1", granularity="slowly")


def test_draining_twice_is_refused(cluster: Pipeline, user: Any) -> None:
    worker_drain(user=user, name="w2")
    with pytest.raises(WorkerStatusConflict, match="drain operation"):
        worker_drain(user=user, name="w2")
    assert RescaleOperation.objects.count() == 1


@pytest.mark.parametrize("status", ["lost", "removed", "decommissioning"])
def test_drain_is_refused_for_a_worker_that_is_leaving_or_gone(
    cluster: Pipeline, user: Any, status: str
) -> None:
    Worker.objects.filter(name="w2").update(status=status)
    with pytest.raises(WorkerStatusConflict):
        worker_drain(user=user, name="w2")
    assert RescaleOperation.objects.count() == 0


def test_a_drain_that_would_empty_a_fragment_is_refused_and_changes_nothing(
    cluster: Pipeline, user: Any
) -> None:
    # word_count on w1's PUs only
    operation = operation_request(
        user=user, body={"changes": {"word_count": {"removed_parallel_units": [2]}}}
    )
    drive._finalize(operation, "completed", "test")
    cluster_services.topology_register(
        topology=Topology(
            pipeline=PIPELINE,
            workers={"w1": [0, 1], "w2": [2, 3]},
            fragments={"word_count": {"kind": "stateful", "vnodes": 12, "parallel_units": [0, 1]}},
            spark={},
        )
    )
    with pytest.raises(DrainEmptiesFragment, match="runs only on its parallel units \\[0, 1\\]"):
        worker_drain(user=user, name="w1")
    assert worker("w1").status == "active", "a refused drain leaves the worker as it was"
    assert actions("w1") == ["worker.joined"]


def test_a_drain_refused_by_validation_leaves_the_worker_as_it_was(
    cluster: Pipeline, user: Any
) -> None:
    operation_request(user=user, body={"changes": {"word_count": {"added_parallel_units": [3]}}})
    with pytest.raises(errors.FragmentBusy):
        worker_drain(user=user, name="w2")
    assert worker("w2").status == "active"


def test_a_worker_running_no_stateful_fragment_is_decommissioned_at_once(
    cluster: Pipeline, user: Any
) -> None:
    workers_record(pipeline=PIPELINE, epoch=3, workers=[W1, W2, info("w3", (4, 5))])
    drain = worker_drain(user=user, name="w3", reason="not needed")
    assert drain.operation is None
    w3 = worker("w3")
    assert w3.status == "decommissioning"
    command = RunnerCommand.objects.get()
    assert command.kind == "worker.decommission" and command.payload == {"worker": "w3"}
    assert actions("w3") == ["worker.joined", "worker.decommissioning"]
    assert AuditEvent.objects.get(action="worker.decommissioning").before["status"] == "active"


def test_a_completed_drain_queues_the_decommission_then_the_worker_is_removed(
    cluster: Pipeline, user: Any, released: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    op = worker_drain(user=user, name="w2").operation
    assert op is not None
    drive._finalize(op, "completed", "4 vnodes moved")
    w2 = worker("w2")
    assert w2.status == "decommissioning"
    command = RunnerCommand.objects.get(kind="worker.decommission")
    assert command.payload == {"worker": "w2"} and command.status == "pending"
    assert actions("w2")[-1] == "worker.decommissioning"
    assert (
        AuditEvent.objects.filter(action="worker.decommissioning").get().actor_name
        == "orchestrator"
    )
    # the runner kills the executor: w2 is gone from its next report
    OrmControl().ack_command(command.id, "done")
    with django_capture_on_commit_callbacks(execute=True):
        workers_record(pipeline=PIPELINE, epoch=20, workers=[W1])
    w2 = worker("w2")
    assert w2.status == "removed" and not w2.alive
    assert pu_status(2, 3) == ["removed", "removed"]
    assert actions("w2")[-1] == "worker.removed"
    assert released == [w2.pk], "the provider is asked to release it (after the commit)"
    with django_capture_on_commit_callbacks(execute=True):
        workers_record(pipeline=PIPELINE, epoch=21, workers=[W1])
    assert actions("w2").count("worker.removed") == 1 and released == [w2.pk]


@pytest.mark.parametrize("final", ["cancelled", "failed"])
def test_a_drain_that_does_not_complete_leaves_the_worker_cordoned(
    cluster: Pipeline, user: Any, final: str
) -> None:
    op = worker_drain(user=user, name="w2").operation
    assert op is not None
    drive._finalize(op, final, "the runner said no")
    w2 = worker("w2")
    assert w2.status == "cordoned"
    assert f"drain operation {op.operation_id} {final}: the runner said no" == w2.status_reason
    assert not RunnerCommand.objects.filter(kind="worker.decommission").exists()
    assert actions("w2")[-1] == "worker.drain_failed"


def test_a_cancelled_drain_goes_through_the_ordinary_cancel(cluster: Pipeline, user: Any) -> None:
    op = worker_drain(user=user, name="w2").operation
    assert op is not None
    operation_cancel(user=user, operation=op)
    assert drive.operation_drive(pk=op.id, budget_s=1) == "cancelled"
    assert worker("w2").status == "cordoned"


def test_a_refused_decommission_puts_the_worker_back_to_cordoned(
    cluster: Pipeline, user: Any
) -> None:
    op = worker_drain(user=user, name="w2").operation
    assert op is not None
    drive._finalize(op, "completed", "done")
    command = RunnerCommand.objects.get(kind="worker.decommission")
    OrmControl().ack_command(command.id, "failed", "PU 2 still owns vnodes [3]")
    w2 = worker("w2")
    assert w2.status == "cordoned" and "PU 2 still owns vnodes [3]" in w2.status_reason
    assert actions("w2")[-1] == "worker.decommission_refused"


# -- the provider --------------------------------------------------------------------------------
class FakeProvider:
    name = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[Any] = []

    def add(self, cores: int = 1) -> str:
        self.calls.append(("add", cores))
        if self.fail:
            raise ProviderError("no room on the cluster")
        return f"started a {cores}-core worker"

    def release(self, worker: WorkerInfo) -> str:
        self.calls.append(("release", worker))
        if self.fail:
            raise ProviderError("the command exited 1")
        return f"stopped {worker.name}"


def test_add_asks_the_provider_and_audits_its_answer(
    monkeypatch: pytest.MonkeyPatch, user: Any
) -> None:
    provider = FakeProvider()
    monkeypatch.setattr(worker_machines, "provider_from_env", lambda: provider)
    added = worker_add(user=user, cores=4)
    assert added.to_json() == {"provider": "fake", "cores": 4, "answer": "started a 4-core worker"}
    event = AuditEvent.objects.get(action="worker.add_requested")
    assert event.actor == user and event.after["answer"] == "started a 4-core worker"


def test_a_provider_that_cannot_add_is_a_refusal_that_records_nothing(
    monkeypatch: pytest.MonkeyPatch, user: Any
) -> None:
    monkeypatch.setattr(worker_machines, "provider_from_env", lambda: FakeProvider(fail=True))
    with pytest.raises(ProviderRefused, match="no room on the cluster"):
        worker_add(user=user, cores=1)
    assert not AuditEvent.objects.exists()


def test_without_a_provider_add_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, user: Any
) -> None:
    monkeypatch.delenv("RESCALER_WORKER_PROVIDER", raising=False)
    monkeypatch.setenv("SPARK_MASTER", "local[2]")
    with pytest.raises(ProviderRefused, match="local mode runs in one JVM"):
        worker_add(user=user, cores=1)


@pytest.mark.parametrize("cores", [0, 65, True, "2", None])
def test_cores_out_of_range_are_malformed(user: Any, cores: Any) -> None:
    with pytest.raises(errors.MalformedRequest, match="cores"):
        worker_add(user=user, cores=cores)


@pytest.mark.parametrize("fail", [False, True])
def test_release_records_the_providers_answer_or_error_and_never_raises(
    cluster: Pipeline, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    provider = FakeProvider(fail=fail)
    monkeypatch.setattr(worker_machines, "provider_from_env", lambda: provider)
    w2 = worker("w2")
    answer = worker_release(worker_pk=w2.pk)
    ((_, seen),) = provider.calls
    assert seen.name == "w2" and seen.executor_id == "2" and seen.host == "host-w2"
    if fail:
        assert "the command exited 1" in answer
        assert AuditEvent.objects.get(action="worker.release_failed").after["error"] == answer
    else:
        assert answer == "stopped w2"
        assert AuditEvent.objects.get(action="worker.released").after["provider"] == "fake"


def test_a_drain_whose_vnodes_could_only_go_to_closed_pus_is_refused(
    cluster: Pipeline, user: Any
) -> None:
    worker_cordon(user=user, name="w1")
    with pytest.raises(DrainEmptiesFragment, match="take no new vnodes"):
        worker_drain(user=user, name="w2")
    assert worker("w2").status == "active"


def test_an_add_done_while_the_database_restarts_is_audited_once_it_is_back(
    monkeypatch: pytest.MonkeyPatch, user: Any
) -> None:
    """The machine is started before its audit is written: a database restart in between (a
    soak: ``POST /api/v1/workers`` answered 503 "try again" with the worker already started)
    must not tell the operator to add another. The audit waits for the database."""
    from django.db import OperationalError

    provider = FakeProvider()
    monkeypatch.setattr(worker_machines, "provider_from_env", lambda: provider)
    real_audit = worker_machines.audit_record
    failures = [OperationalError("server closed the connection unexpectedly")]

    def audit_while_restarting(**kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_audit(**kwargs)

    monkeypatch.setattr(worker_machines, "audit_record", audit_while_restarting)
    monkeypatch.setattr(worker_machines, "database_back", lambda deadline: True)
    added = worker_add(user=user, cores=2)
    assert added.answer == "started a 2-core worker" and provider.calls == [("add", 2)]
    assert AuditEvent.objects.filter(action="worker.add_requested").count() == 1

    # the database never back within the wait: the machine is there all the same, said so
    failures.append(OperationalError("connection refused"))
    monkeypatch.setattr(worker_machines, "database_back", lambda deadline: False)
    added = worker_add(user=user, cores=1)
    assert "not audited" in added.answer and provider.calls[-1] == ("add", 1)
