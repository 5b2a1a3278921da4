"""The autoscaler and the worker provider (``rescaler.autoscaling.provisioning``): a decision
short of PUs asks the provider for workers once, starts when they have joined or fails after
the join time; recommend mode asks on "apply" only; a completed scale-in of auto mode drains
and removes the worker it emptied, never one holding vnodes, never the last. The provider is
faked at its boundary (``provider_from_env``); everything above it is the real path."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.decisions import decision_list
from rescaler.autoscaling.evaluation import AUTOSCALER, autoscaling_evaluate
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.autoscaling.recommendation import (
    recommendation_get,
    recommendation_workers_request,
)
from rescaler.autoscaling.services import autoscaling_policy_update
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Pipeline, RunnerCommand, Worker
from rescaler.operations import drive
from rescaler.operations.models import RescaleOperation
from rescaler.runner import control
from rescaler.runner.control import OrmControl
from rescaler.runner.workers import machines, tasks, workers_record
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from tests.unit.rescaler.autoscaling.fixtures import report_epochs
from tests.unit.rescaler.autoscaling.test_decisions import RECOMMEND
from workers.control import Topology, WorkerInfo
from workers.pipeline.placement import VnodeMapping
from workers.provider import ProviderError
from workers.rescale.protocol import OperationStatus

pytestmark = pytest.mark.django_db

Outcome = AutoscalingDecision.Outcome


class FakeProvider:
    """The worker provider's boundary: records what it was asked, starts nothing."""

    name = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.added: list[int] = []
        self.released: list[str] = []

    def add(self, cores: int = 1) -> str:
        if self.fail:
            raise ProviderError("no room on the cluster")
        self.added.append(cores)
        return f"started a {cores}-core worker"

    def release(self, worker: WorkerInfo) -> str:
        self.released.append(worker.name)
        return f"stopped {worker.name}"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    fake = FakeProvider()
    monkeypatch.setattr(machines, "provider_from_env", lambda: fake)
    return fake


@pytest.fixture(autouse=True)
def _keep_the_test_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """OrmControl refreshes old connections first: in a test that would close the test's own."""
    monkeypatch.setattr(control, "close_old_connections", lambda: None)


@pytest.fixture
def admin(db: None) -> Any:
    return make_user("admin", rescale=True, policy=True)


def info(name: str, pus: tuple[int, ...], *, boot: int = 0, alive: bool = True) -> WorkerInfo:
    return WorkerInfo(
        name=name,
        executor_id=name,
        host=f"host-{name}",
        cores=len(pus),
        parallel_units=pus,
        alive=alive,
        bootstrapped_epoch=boot,
    )


LOCAL = info("local-0", (0, 1))


def short_of_one_pu(admin: Any, mode: str) -> Pipeline:
    """word_count on both PUs of the cluster's only worker (2 cores), its signals calling for 3."""
    pipeline = register_cluster(epochs=0, workers={"local-0": [0, 1]})
    workers_record(pipeline=PIPELINE, epoch=0, workers=[LOCAL])
    report_epochs(count=60, records=lambda e, pu: 900 if e >= 5 else 300, busy_s_per_record=0.002)
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={**RECOMMEND, "mode": mode})
    return pipeline


def joins(*, boot: int) -> None:
    """The worker the provider started joins with PU 2 (``boot`` -1: not bootstrapped yet)."""
    workers_record(pipeline=PIPELINE, epoch=61, workers=[LOCAL, info("w1", (2,), boot=boot)])


# -- scale out: the ask ------------------------------------------------------------------------
def test_auto_asks_the_provider_once_then_starts_when_the_worker_joined(
    admin: Any, provider: FakeProvider
) -> None:
    short_of_one_pu(admin, "auto")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and (row.kind, row.outcome) == ("scale", Outcome.AWAITING_WORKERS)
    assert provider.added == [2], "one worker shaped like the cluster's, for the 1 PU short"
    assert (row.workers_requested, row.workers_requested_at is not None) == (1, True)
    assert "asked the worker provider for 1 worker(s) of 2 core(s)" in row.outcome_reason
    asked = AuditEvent.objects.get(action="autoscaling.workers_requested")
    assert (asked.actor_name, asked.object_id) == (AUTOSCALER, PIPELINE) and asked.after
    assert asked.after["decision"] == row.pk and asked.after["parallel_units_short"] == {
        FRAGMENT: 1
    }
    added = AuditEvent.objects.get(action="worker.add_requested")
    assert added.actor_name == AUTOSCALER
    # evaluated again before it joined: the same decision, asked nothing more
    assert autoscaling_evaluate(pipeline=PIPELINE) == row
    assert provider.added == [2] and not RescaleOperation.objects.exists()
    # joined but not bootstrapped: its PU takes no vnodes yet, still waiting
    joins(boot=-1)
    assert autoscaling_evaluate(pipeline=PIPELINE) == row
    assert AutoscalingDecision.objects.get(pk=row.pk).outcome == Outcome.AWAITING_WORKERS
    assert not RescaleOperation.objects.exists()
    # bootstrapped: the decision's rescale starts, onto the new PU
    joins(boot=61)
    started = autoscaling_evaluate(pipeline=PIPELINE)
    assert started == row and started is not None
    assert started.outcome == Outcome.STARTED, started.outcome_reason
    op = RescaleOperation.objects.get()
    assert started.operation == op and op.requested_by is None
    assert op.changes[FRAGMENT]["added_parallel_units"] == [2]
    assert "its 1 worker(s) joined" in started.outcome_reason
    assert provider.added == [2] and AutoscalingDecision.objects.count() == 1


def test_workers_that_do_not_join_in_time_end_the_decision_failed(
    admin: Any, provider: FakeProvider, settings: Any
) -> None:
    settings.RESCALER_AUTOSCALING_WORKER_JOIN_S = 120
    short_of_one_pu(admin, "auto")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and row.outcome == Outcome.AWAITING_WORKERS
    # the join time passes without the worker
    AutoscalingDecision.objects.filter(pk=row.pk).update(
        workers_requested_at=timezone.now() - dt.timedelta(seconds=121)
    )
    failed = autoscaling_evaluate(pipeline=PIPELINE)
    assert failed == row and failed is not None
    assert (failed.outcome, failed.error_code) == (Outcome.FAILED, "workers_did_not_join")
    assert failed.outcome_reason == (
        "the 1 worker(s) asked of the worker provider did not join (their PUs bootstrapped) "
        "within 120 s: nothing was started"
    )
    event = AuditEvent.objects.get(action="autoscaling.decision_failed")
    assert event.actor_name == AUTOSCALER and event.after and event.after["decision"] == row.pk
    # nothing else changed: no rescale, no second ask, the same decision while within cooldown
    assert autoscaling_evaluate(pipeline=PIPELINE) == row
    assert not RescaleOperation.objects.exists() and provider.added == [2]
    assert AutoscalingDecision.objects.get().outcome == Outcome.FAILED
    # the decision history shows it
    (listed,) = decision_list(pipeline=Pipeline.objects.get(name=PIPELINE))
    assert (listed.outcome, listed.workers_requested) == ("failed", 1)


def test_a_provider_that_refuses_is_asked_once_and_the_decision_refused(
    admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusing = FakeProvider(fail=True)
    monkeypatch.setattr(machines, "provider_from_env", lambda: refusing)
    short_of_one_pu(admin, "auto")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None
    assert (row.outcome, row.error_code) == (Outcome.REFUSED, "worker_provider_refused")
    assert "no room on the cluster" in row.outcome_reason and row.workers_requested == 0
    calls: list[int] = []

    def counted() -> FakeProvider:  # counts the asks from here on
        calls.append(1)
        return refusing

    monkeypatch.setattr(machines, "provider_from_env", counted)
    again = autoscaling_evaluate(pipeline=PIPELINE)
    assert again == row and calls == [] and not RescaleOperation.objects.exists()


def test_recommend_says_how_many_workers_and_asks_only_on_apply(
    admin: Any, provider: FakeProvider
) -> None:
    short_of_one_pu(admin, "recommend")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and row.outcome == Outcome.PROPOSED
    found = recommendation_get(user=admin, pipeline=PIPELINE, plan=True)
    assert found.workers_needed == 1
    assert any("asks the worker provider for 1 worker(s)" in note for note in found.notes)
    assert provider.added == [], "nothing is asked until apply"
    applied = recommendation_workers_request(user=admin, pipeline=PIPELINE)
    assert applied.pk == row.pk and applied.outcome == Outcome.AWAITING_WORKERS
    assert applied.applied_by == admin and provider.added == [2]
    assert AuditEvent.objects.get(action="autoscaling.workers_requested").actor == admin
    # apply again: the same decision asks nothing more
    assert recommendation_workers_request(user=admin, pipeline=PIPELINE).pk == row.pk
    assert provider.added == [2]
    # the worker joins: the evaluation carries the applied decision on
    joins(boot=61)
    started = autoscaling_evaluate(pipeline=PIPELINE)
    assert started is not None and started.pk == row.pk
    assert (started.outcome, started.applied_by) == (Outcome.APPLIED, admin)
    assert started.outcome_reason.startswith("applied by admin, started by the autoscaler")
    assert RescaleOperation.objects.get().changes[FRAGMENT]["added_parallel_units"] == [2]


# -- scale in: the emptied worker --------------------------------------------------------------
def two_workers(word_count_pus: list[int], version: int = 1) -> Pipeline:
    """w1 (PUs 0, 1) and w2 (PUs 2, 3); word_count on ``word_count_pus``."""
    placement = VnodeMapping.initial(FRAGMENT, 12, word_count_pus)
    return cluster_services.topology_register(
        topology=Topology(
            pipeline=PIPELINE,
            workers={"w1": [0, 1], "w2": [2, 3]},
            fragments={
                "source": {"kind": "source", "parallel_units": [0, 1]},
                FRAGMENT: {
                    "kind": "stateful",
                    "vnodes": 12,
                    "parallel_units": word_count_pus,
                    "mapping": list(placement.mapping),
                    "version": version,
                },
                "sink": {"kind": "sink", "parallel_units": [0, 1]},
            },
            spark={"alive": True},
        )
    )


W1, W2 = info("w1", (0, 1)), info("w2", (2, 3))


def scaled_in(
    *, before: list[int], after: list[int], capture: Any, mode: str = "auto", w1_alive: bool = True
) -> AutoscalingDecision:
    """A scale-in of word_count from ``before`` to ``after`` that the autoscaler started for
    its decision, completed: the runner's final placement, then the operation's end."""
    pipeline = two_workers(before)
    workers_record(pipeline=PIPELINE, epoch=0, workers=[W1, W2])
    removed = sorted(set(before) - set(after))
    op = RescaleOperation.objects.create(
        pipeline=pipeline,
        strategy="live",
        status="running",
        changes={FRAGMENT: {"added_parallel_units": [], "removed_parallel_units": removed}},
    )
    row = AutoscalingDecision.objects.create(
        pipeline=pipeline, decided_at=timezone.now(), mode=mode, kind="scale",
        operation=op, outcome=Outcome.STARTED, outcome_reason="started by the autoscaler",
    )  # fmt: skip
    two_workers(after, version=2)
    Worker.objects.filter(name="w1").update(alive=w1_alive)
    with capture(execute=True):
        drive._finalize(op, OperationStatus.COMPLETED, f"{len(removed)} PU(s) removed")
    row.refresh_from_db()
    return row


def test_a_scale_in_that_empties_a_worker_drains_and_removes_it(
    admin: Any,
    provider: FakeProvider,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    monkeypatch.setitem(tasks.release_worker.app.conf, "task_always_eager", True)
    row = scaled_in(before=[0, 1, 2], after=[0, 1], capture=django_capture_on_commit_callbacks)
    assert row.workers_released == ["w2"]
    assert row.outcome_reason.endswith("the worker(s) it emptied drained and removed: w2")
    w2 = Worker.objects.get(name="w2")
    assert w2.status == "decommissioning" and Worker.objects.get(name="w1").status == "active"
    command = RunnerCommand.objects.get(kind="worker.decommission")
    assert command.payload == {"worker": "w2"}
    event = AuditEvent.objects.get(action="worker.decommissioning")
    assert event.actor_name == AUTOSCALER
    # the drain is visible to the guard: nothing is decided while w2 leaves
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={**RECOMMEND, "mode": "auto"})
    guarded = autoscaling_evaluate(pipeline=PIPELINE)
    assert guarded is not None and guarded.kind == "no_change"
    assert "w2" in guarded.reasons[0] and "draining" in guarded.reasons[0]
    # the runner drops it: removed, and its machine released through the provider
    OrmControl().ack_command(command.id, "done")
    with django_capture_on_commit_callbacks(execute=True):
        workers_record(pipeline=PIPELINE, epoch=20, workers=[W1])
    assert Worker.objects.get(name="w2").status == "removed"
    assert provider.released == ["w2"]
    assert AuditEvent.objects.filter(action="worker.released").count() == 1


def test_a_worker_still_holding_vnodes_is_kept(
    provider: FakeProvider, django_capture_on_commit_callbacks: Any
) -> None:
    # PU 3 leaves word_count; w2 keeps PU 2 and its vnodes
    row = scaled_in(
        before=[0, 1, 2, 3], after=[0, 1, 2], capture=django_capture_on_commit_callbacks
    )
    assert row.workers_released == []
    assert set(Worker.objects.values_list("status", flat=True)) == {"active"}
    assert not RunnerCommand.objects.filter(kind="worker.decommission").exists()


def test_the_last_worker_is_kept(
    provider: FakeProvider, django_capture_on_commit_callbacks: Any
) -> None:
    # w1's executor went (not alive yet reported lost): the emptied w2 is the last live worker
    row = scaled_in(
        before=[0, 1, 2], after=[0, 1], capture=django_capture_on_commit_callbacks,
        w1_alive=False,
    )  # fmt: skip
    assert row.workers_released == []
    assert Worker.objects.get(name="w2").status == "active"
    assert not RunnerCommand.objects.filter(kind="worker.decommission").exists()


def test_a_scale_in_an_operator_applied_removes_no_worker(
    provider: FakeProvider, django_capture_on_commit_callbacks: Any
) -> None:
    row = scaled_in(
        before=[0, 1, 2], after=[0, 1], capture=django_capture_on_commit_callbacks,
        mode="recommend",
    )  # fmt: skip
    assert row.workers_released == [] and Worker.objects.get(name="w2").status == "active"
