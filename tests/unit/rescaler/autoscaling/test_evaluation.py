"""Auto mode acting (``rescaler.autoscaling.evaluation``): within the guard rails a change of
size starts as a live rescale by the autoscaler, audited; what it cannot start is refused with
the reason; the runner's epochs queue the evaluation at most once per interval."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling import tasks
from rescaler.autoscaling.decisions import decision_refused
from rescaler.autoscaling.evaluation import AUTOSCALER, autoscaling_evaluate
from rescaler.autoscaling.models import AutoscalingDecision, AutoscalingPolicy
from rescaler.autoscaling.services import autoscaling_policy_update
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Fragment, Pipeline, Worker
from rescaler.operations.models import OperationPlan, RescaleOperation
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from tests.unit.rescaler.autoscaling.fixtures import report_epochs
from tests.unit.rescaler.autoscaling.test_decisions import RECOMMEND, stepped
from workers.control import Topology
from workers.provider import NoProvider
from workers.rescale import errors

pytestmark = pytest.mark.django_db

Outcome = AutoscalingDecision.Outcome


@pytest.fixture
def admin(db: None) -> Any:
    return make_user("admin", rescale=True, policy=True)


def test_auto_starts_the_bound_plan_by_the_autoscaler(admin: Any) -> None:
    stepped(admin, mode="auto")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    op = RescaleOperation.objects.get()
    assert row is not None and (row.mode, row.kind, row.outcome) == ("auto", "scale", "started")
    assert row.operation == op and row.applied_by is None
    assert row.outcome_reason == f"started by the autoscaler: operation {op.operation_id}"
    plan = OperationPlan.objects.get()
    assert (plan.requested_by, plan.operation, row.plan_id) == (None, op, plan.plan_id)
    assert op.requested_by is None and op.strategy == "live"
    assert op.changes == {FRAGMENT: {"added_parallel_units": [2], "removed_parallel_units": []}}
    requested = AuditEvent.objects.get(action="operation.requested")
    assert (requested.actor, requested.actor_name) == (None, AUTOSCALER)
    assert requested.after["plan_id"] == plan.plan_id
    started = AuditEvent.objects.get(action="autoscaling.decision_started")
    assert (started.actor_name, started.object_id) == (AUTOSCALER, PIPELINE)
    assert started.after["operation_id"] == op.operation_id
    assert started.after["parallel_units"] == {FRAGMENT: 3}
    # evaluated again while it runs: nothing is decided (the model's guard), nothing starts
    during = autoscaling_evaluate(pipeline=PIPELINE)
    assert during is not None and during.kind == "no_change" and during.pk != row.pk
    assert "is in progress" in during.reasons[0]
    assert autoscaling_evaluate(pipeline=PIPELINE) == during
    assert RescaleOperation.objects.count() == 1
    assert AutoscalingDecision.objects.get(pk=row.pk).outcome == Outcome.STARTED


def test_recommend_proposes_and_starts_nothing(admin: Any) -> None:
    stepped(admin)
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and (row.kind, row.outcome) == ("scale", "proposed")
    assert not RescaleOperation.objects.exists()
    assert not OperationPlan.objects.exists()  # each operator plans their own on looking


def test_off_decides_nothing(admin: Any) -> None:
    stepped(admin, mode="off")
    assert autoscaling_evaluate(pipeline=PIPELINE) is None
    assert not AutoscalingDecision.objects.exists() and not RescaleOperation.objects.exists()


def test_switching_to_auto_starts_the_decision(admin: Any) -> None:
    stepped(admin)
    proposed = autoscaling_evaluate(pipeline=PIPELINE)
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={"mode": "auto"})
    started = autoscaling_evaluate(pipeline=PIPELINE)
    assert proposed is not None and started is not None and started.pk != proposed.pk
    assert started.outcome == Outcome.STARTED
    proposed.refresh_from_db()
    assert proposed.outcome == Outcome.SUPERSEDED


def test_more_pus_than_the_cluster_offers_without_a_provider_is_refused_then_started(
    admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked once, the provider refuses (local mode has none): the decision is refused with
    its reason; once the cluster offers the PU, the same decision starts."""
    none = NoProvider("no worker provider: local mode runs in one JVM")
    monkeypatch.setattr("rescaler.runner.workers.machines.provider_from_env", lambda: none)
    # the cluster's only worker has PUs 0 and 1, both word_count's already
    register_cluster(epochs=0, workers={"local-0": [0, 1]})
    report_epochs(count=60, records=lambda e, pu: 900 if e >= 5 else 300, busy_s_per_record=0.002)
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={**RECOMMEND, "mode": "auto"})
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and (row.outcome, row.error_code) == (
        "refused",
        "worker_provider_refused",
    )
    assert "needs 1 more PU(s) than the cluster has free" in row.outcome_reason
    assert "local mode runs in one JVM" in row.outcome_reason
    assert not RescaleOperation.objects.exists() and not OperationPlan.objects.exists()
    refused_at = row.outcome_at
    again = autoscaling_evaluate(pipeline=PIPELINE)
    assert again == row and AutoscalingDecision.objects.count() == 1
    assert AutoscalingDecision.objects.get().outcome_at == refused_at  # nothing rewritten
    # the worker offers one more PU: the same decision starts
    cluster_services.topology_register(
        topology=Topology(pipeline=PIPELINE, workers={"local-0": [0, 1, 2]}, fragments={}, spark={})
    )
    started = autoscaling_evaluate(pipeline=PIPELINE)
    assert started == row and started is not None
    assert (started.outcome, started.error_code) == ("started", ""), started.outcome_reason
    assert RescaleOperation.objects.get().changes[FRAGMENT]["added_parallel_units"] == [2]


def test_a_start_refused_is_recorded_with_its_code(
    admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stepped(admin, mode="auto")

    def busy(**kwargs: Any) -> None:
        raise errors.FragmentBusy("word_count is busy with operation x")

    monkeypatch.setattr("rescaler.autoscaling.evaluation.recommendation_apply", busy)
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and (row.outcome, row.error_code) == ("refused", "fragment_busy")
    assert row.outcome_reason == "word_count is busy with operation x"
    assert not AuditEvent.objects.filter(action="autoscaling.decision_started").exists()


def test_a_started_decision_is_never_marked_refused(admin: Any) -> None:
    stepped(admin, mode="auto")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and row.outcome == Outcome.STARTED
    assert not decision_refused(row=row, code="plan_stale", reason="late")
    row.refresh_from_db()
    assert row.outcome == Outcome.STARTED


def test_nothing_is_started_within_the_cooldown(admin: Any) -> None:
    pipeline = stepped(admin, mode="auto", cooldown_s=600)
    RescaleOperation.objects.create(
        pipeline=pipeline, strategy="live", status="completed", finished_at=timezone.now()
    )
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and row.kind == "no_change" and "cooldown" in row.reasons[0]
    assert RescaleOperation.objects.count() == 1


def test_nothing_is_started_while_a_worker_drains(admin: Any) -> None:
    stepped(admin, mode="auto")
    Worker.objects.filter(name="local-0").update(status="draining")
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and row.kind == "no_change" and "draining" in row.reasons[0]
    assert not RescaleOperation.objects.exists()


def test_a_rebalance_is_refused_in_auto_mode(admin: Any) -> None:
    """Skew at the right size: the rebalance has no request yet."""
    register_cluster(epochs=0)
    report_epochs(
        count=60,
        # 550 records/s on 2 PUs at 500 per busy second: 55 % busy, the size is right
        records=lambda e, pu: 900 if pu == 0 else 200,
        busy_s_per_record=0.002,
        vnodes=16,
    )
    autoscaling_policy_update(
        user=admin,
        pipeline=PIPELINE,
        changes={"mode": "auto", "stabilisation_s": 60, "cooldown_s": 60},
    )
    # the measured per-vnode load: PU 0's vnodes hot, spread over several of them
    Fragment.objects.filter(name=FRAGMENT).update(
        vnode_load={str(v): [10, 100, 50.0 if v < 8 else 10.0] for v in range(16)}
    )
    row = autoscaling_evaluate(pipeline=PIPELINE)
    assert row is not None and row.kind == "rebalance", row.reasons if row else None
    assert (row.outcome, row.error_code) == ("refused", "nothing_to_start")
    assert "no request yet" in row.outcome_reason
    assert not RescaleOperation.objects.exists()


# -- the trigger: the runner's epochs, at most one evaluation per interval -----------------------
def _epoch(epoch: int) -> None:
    report_epochs(count=1, records=lambda e, pu: 10, first_epoch=epoch)


def test_epochs_queue_an_evaluation_at_most_once_per_interval(
    admin: Any, evaluations: list[int], settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.RESCALER_AUTOSCALING_INTERVAL_S = 30
    pipeline = register_cluster(epochs=0)

    def epochs(*numbers: int) -> None:
        with django_capture_on_commit_callbacks(execute=True):  # as committed, one by one
            for epoch in numbers:
                _epoch(epoch)

    epochs(0)
    assert evaluations == []  # off: nothing to evaluate
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={"mode": "recommend"})
    epochs(1, 2, 3, 4, 5)
    assert evaluations == [pipeline.pk]
    # the interval passed: the next epoch queues the next one
    AutoscalingPolicy.objects.update(evaluation_queued_at=timezone.now() - dt.timedelta(seconds=31))
    epochs(6, 7)
    assert evaluations == [pipeline.pk, pipeline.pk]


def test_the_task_evaluates_the_pipeline(admin: Any) -> None:
    pipeline = stepped(admin, mode="auto")
    result = tasks.autoscaling_evaluate.apply(args=(pipeline.pk,)).get()
    row = AutoscalingDecision.objects.get()
    assert result == {"decision": row.pk, "kind": "scale", "outcome": "started"}
    assert tasks.autoscaling_evaluate.apply(args=(10**9,)).get() is None


def test_epochs_reach_the_task_and_it_starts_the_rescale(
    admin: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """The wiring, with Celery eager: an epoch of a pipeline in auto mode queues the task,
    which starts the rescale."""
    monkeypatch.undo()  # the real evaluate_later, with the task run in place
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    monkeypatch.setitem(tasks.autoscaling_evaluate.app.conf, "task_always_eager", True)
    # the next epoch 2 s after the 60th, however long the test took to get there: its input
    # rate is its records over that gap
    last = time.time()
    stepped(admin, end_at=last, mode="auto")
    assert not RescaleOperation.objects.exists()  # the policy came after the epochs
    with django_capture_on_commit_callbacks(execute=True):
        report_epochs(
            count=1,
            records=lambda e, pu: 900,
            first_epoch=60,
            busy_s_per_record=0.002,
            end_at=last + 2.0,
        )
    row = AutoscalingDecision.objects.get()
    assert row.outcome == Outcome.STARTED and RescaleOperation.objects.get() == row.operation


def test_a_broker_down_is_logged_and_the_epoch_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.undo()  # the real evaluate_later

    def down(*args: Any, **kwargs: Any) -> None:
        raise BrokerUnavailable("connection refused")

    monkeypatch.setattr(tasks.autoscaling_evaluate, "apply_async", down)
    with caplog.at_level(logging.WARNING, logger="rescaler.autoscaling.tasks"):
        tasks.evaluate_later(1)
    assert "could not be queued" in caplog.text


def test_a_failing_receiver_never_fails_the_epoch(
    admin: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    register_cluster(epochs=0)

    def broken(**kwargs: Any) -> bool:
        raise RuntimeError("boom")

    monkeypatch.setattr("rescaler.autoscaling.receivers.evaluation_due", broken)
    with caplog.at_level(logging.WARNING, logger="rescaler.cluster.services"):
        _epoch(0)
    assert Pipeline.objects.get(name=PIPELINE).last_epoch == 0
    assert "boom" in caplog.text
