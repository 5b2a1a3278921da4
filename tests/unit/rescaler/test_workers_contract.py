"""The runner's workers (``workers.membership``) through the control plane (``OrmControl``): the
contract of docs/elastic-workers.md from both sides, without Spark (executors are plain records,
the runner's moves are simulated by finalizing the operation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from rescaler.cluster.models import ParallelUnit, RunnerCommand, Worker
from rescaler.operations import drive
from rescaler.operations.models import OperationPlan
from rescaler.operations.requests import operation_request
from rescaler.runner import control
from rescaler.runner import workers as worker_services
from rescaler.runner.control import OrmControl
from rescaler.runner.workers import tasks as worker_tasks
from workers.control import Heartbeat, Topology
from workers.membership import ExecutorSeen, Membership
from workers.pipeline.placement import VnodeMapping
from workers.rescale import errors

pytestmark = pytest.mark.django_db

PIPELINE = "wordcount"
E0, E1, E2 = (ExecutorSeen(str(i), f"10.0.0.{i}", 2) for i in range(3))


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """No Celery, no thread, and the test's own database connection kept."""
    released: list[int] = []
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    monkeypatch.setattr(worker_tasks, "release_later", released.append)
    monkeypatch.setattr(control, "close_old_connections", lambda: None)
    return released


def _bootstrap(pus: tuple[int, ...], epoch: int) -> None:
    """The runner creates the PUs' stores here; nothing to do without Spark."""


def status(name: str) -> str:
    return Worker.objects.get(name=name).status


def test_join_drain_decommission_and_loss(
    tmp_path: Path, _quiet: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    orm = OrmControl()
    membership = Membership(tmp_path, local=False, local_pus=2, pus_per_executor=2)
    membership.start([E0, E1])
    membership.observe([E0, E1], 0, _bootstrap, poll=False)
    placement = VnodeMapping.initial("word_count", 16, [0, 1, 2, 3])
    orm.register(
        Topology(
            pipeline=PIPELINE,
            workers=membership.worker_pus(),
            fragments={
                "word_count": {
                    "kind": "stateful",
                    "vnodes": 16,
                    "parallel_units": [0, 1, 2, 3],
                    "mapping": list(placement.mapping),
                    "version": 1,
                }
            },
            spark={"alive": True},
        )
    )
    orm.report_workers(PIPELINE, 0, membership.snapshot())
    orm.heartbeat(Heartbeat(PIPELINE, 0, "running", {"alive": True}))
    assert {w.name: w.status for w in Worker.objects.all()} == {"w1": "active", "w2": "active"}
    user = get_user_model().objects.create_user("operator", password="x")

    # a third executor joins: its PUs are bootstrapped at the barrier that sees it
    assert membership.observe([E0, E1, E2], 5, _bootstrap)
    orm.report_workers(PIPELINE, 5, membership.snapshot())
    w3 = Worker.objects.get(name="w3")
    assert (w3.status, w3.executor_id, w3.bootstrapped_epoch) == ("active", "2", 5)
    plan = operation_request(
        user=user,
        body={"changes": {"word_count": {"added_parallel_units": [4]}}, "dry_run": True},
    )
    assert isinstance(plan, OperationPlan)
    assert plan.plan["fragments"]["word_count"]["parallel_units_after"] == [0, 1, 2, 3, 4]

    # drain w2: one operation removes PUs 2 and 3; the runner moves the vnodes (simulated)
    drain = worker_services.worker_drain(user=user, name="w2", reason="scale down")
    assert drain.operation is not None
    assert drain.operation.changes["word_count"]["removed_parallel_units"] == [2, 3]
    drive._finalize(drain.operation, "completed", "8 vnodes moved")
    assert status("w2") == "decommissioning"
    command = RunnerCommand.objects.get(kind="worker.decommission")
    # the runner: the placement no longer names PUs 2 and 3, so the decommission is accepted
    membership.decommission(command.payload["worker"], holding={0, 1})
    with django_capture_on_commit_callbacks(execute=True):
        orm.report_workers(PIPELINE, 12, membership.snapshot())
    orm.ack_command(command.id, "done")
    assert status("w2") == "removed"
    assert set(ParallelUnit.objects.filter(number__in=[2, 3]).values_list("status", flat=True)) == {
        "removed"
    }
    assert _quiet == [Worker.objects.get(name="w2").pk], "the provider releases its machine"

    # w3's executor disappears without a drain: lost, and its PUs go to w1, the live worker,
    # where they can be given vnodes again
    assert membership.observe([E0], 20, _bootstrap)
    orm.report_workers(PIPELINE, 20, membership.snapshot())
    assert status("w3") == "lost" and status("w1") == "active"
    assert set(
        ParallelUnit.objects.filter(number__in=[4, 5]).values_list("worker__name", "status")
    ) == {("w1", "active")}
    plan = operation_request(
        user=user,
        body={"changes": {"word_count": {"added_parallel_units": [5]}}, "dry_run": True},
    )
    assert isinstance(plan, OperationPlan)

    # with no live worker left to take them, a lost worker keeps its PUs, which cannot be
    # given vnodes
    assert membership.observe([], 21, _bootstrap)
    orm.report_workers(PIPELINE, 21, membership.snapshot())
    assert status("w1") == "lost"
    with pytest.raises(errors.ParallelUnitLost):
        operation_request(
            user=user, body={"changes": {"word_count": {"added_parallel_units": [5]}}}
        )
