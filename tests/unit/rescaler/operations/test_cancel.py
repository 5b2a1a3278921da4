"""Whether an operation may be cancelled now: one rule (``cancel.operation_cancellable``), which
the cancel service, the operation page's head and a preemption notice all ask (issue 48).

Cancellable: pending or running. A cancelling operation is not (a second cancel is harmless and
records nothing); an ended one is not (a cancel is refused, 409 ``operation_final``). Whether the
runner may hold the operation (``cancel.operation_runner_may_hold``) is one rule too: the cancel
sends the runner its command when it may, and the drive loop ends an operation that it may not
hold as cancelled without asking it.
"""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import operation_page
from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline, RunnerCommand
from rescaler.operations import cancel, drive
from rescaler.operations.errors import OperationFinal
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.runner.workers import notices, worker_notice, workers_record
from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster, request_body
from workers.control import WorkerInfo
from workers.rescale.protocol import CommandKind, OperationStatus

pytestmark = pytest.mark.django_db

CANCELLABLE = {
    OperationStatus.PENDING: True,
    OperationStatus.RUNNING: True,
    OperationStatus.CANCELLING: False,
    OperationStatus.COMPLETED: False,
    OperationStatus.CANCELLED: False,
    OperationStatus.FAILED: False,
}


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)


@pytest.fixture
def cluster() -> Pipeline:
    """word_count on PUs 0, 1 (worker w1) and 2 (w2); w2's PU 3 runs nothing."""
    pipeline = register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2))
    workers_record(
        pipeline=PIPELINE,
        epoch=0,
        workers=[
            WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0),
            WorkerInfo("w2", "2", "host-b", 2, (2, 3), True, 0),
        ],
    )
    return pipeline


@pytest.fixture
def operator() -> Any:
    return make_user("operator", rescale=True)


def _operation(user: Any, status: OperationStatus = OperationStatus.PENDING) -> RescaleOperation:
    op = operation_request(user=user, body=request_body(added_parallel_units=[3]))
    assert isinstance(op, RescaleOperation)
    RescaleOperation.objects.filter(pk=op.pk).update(status=status)
    op.refresh_from_db()
    return op


def test_every_status_is_cancellable_or_not() -> None:
    assert set(CANCELLABLE) == set(OperationStatus)
    for status, cancellable in CANCELLABLE.items():
        assert cancel.operation_cancellable(RescaleOperation(status=status)) is cancellable


@pytest.mark.parametrize("status", list(OperationStatus))
def test_the_page_offers_a_cancel_where_the_service_takes_one(
    cluster: Pipeline, operator: Any, status: OperationStatus
) -> None:
    op = _operation(operator, status)
    assert operation_page.operation_summary(op).cancellable is CANCELLABLE[status]


@pytest.mark.parametrize("status", [s for s, ok in CANCELLABLE.items() if ok])
def test_a_cancellable_operation_is_cancelled(
    cluster: Pipeline, operator: Any, status: OperationStatus
) -> None:
    op = cancel.operation_cancel(operation=_operation(operator, status), user=operator)
    assert op.status == OperationStatus.CANCELLING
    assert AuditEvent.objects.filter(action="operation.cancel_requested").count() == 1


def test_a_second_cancel_records_nothing(cluster: Pipeline, operator: Any) -> None:
    op = _operation(operator, OperationStatus.CANCELLING)
    assert cancel.operation_cancel(operation=op, user=operator).status == "cancelling"
    assert not AuditEvent.objects.filter(action="operation.cancel_requested").exists()


@pytest.mark.parametrize("status", sorted(s for s in CANCELLABLE if s in drive.FINAL))
def test_an_ended_operation_is_refused(
    cluster: Pipeline, operator: Any, status: OperationStatus
) -> None:
    with pytest.raises(OperationFinal):
        cancel.operation_cancel(operation=_operation(operator, status), user=operator)


def test_the_runner_is_told_only_when_it_may_hold_the_operation(
    cluster: Pipeline, operator: Any
) -> None:
    never_begun = _operation(operator)
    assert not cancel.operation_runner_may_hold(never_begun)
    cancel.operation_cancel(operation=never_begun, user=operator)
    assert not RunnerCommand.objects.filter(kind=CommandKind.OPERATION_CANCEL).exists()
    # never sent to the runner: the drive loop ends it without asking the runner
    assert drive.operation_drive(pk=never_begun.pk, budget_s=1) == OperationStatus.CANCELLED

    reported = _operation(operator, OperationStatus.RUNNING)
    RescaleOperation.objects.filter(pk=reported.pk).update(progress={"status": "running"})
    reported.refresh_from_db()
    assert cancel.operation_runner_may_hold(reported)
    cancel.operation_cancel(operation=reported, user=operator)
    assert RunnerCommand.objects.filter(
        kind=CommandKind.OPERATION_CANCEL, payload__operation_id=reported.operation_id
    ).exists()


def test_a_notice_does_not_fail_on_an_operation_that_ended_after_it_looked(
    cluster: Pipeline, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notice asks the operations on its worker's fragments to cancel. One that ends
    between the notice's read of them and its cancel (its last step acquired meanwhile) is no
    longer cancellable, which the cancel, deciding on the locked row, knows: the notice must
    not fail for it (it did, with ``operation_final``, deciding on the row it had read)."""
    busy = _operation(operator, OperationStatus.RUNNING)
    read = notices._busy_operations

    def ends_after_the_read(worker: Any) -> list[RescaleOperation]:
        found = read(worker)
        drive._finalize(busy, OperationStatus.COMPLETED, "done")  # meanwhile, elsewhere
        return found

    monkeypatch.setattr(notices, "_busy_operations", ends_after_the_read)
    noticed = worker_notice(user=operator, name="w2", deadline_s=120)
    assert noticed.worker.status == "cordoned"
    busy.refresh_from_db()
    assert busy.status == OperationStatus.COMPLETED
    assert not AuditEvent.objects.filter(action="operation.cancel_requested").exists()
