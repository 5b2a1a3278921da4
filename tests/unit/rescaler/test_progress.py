"""The runner's progress, stored once (rescaler/operations/progress.py): the report without
its steps on the operation, each step in its row, and only the rows that changed written at a
barrier (issue 23, "Progress once")."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rescaler import events
from rescaler.audit.models import AuditEvent
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.progress import (
    operation_progress,
    operation_progress_record,
    operation_progress_since,
)
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster, token_client
from workers.rescale.protocol import (
    Event,
    OperationProgress,
    OperationStatus,
    ProgressAck,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)


@pytest.fixture
def op() -> RescaleOperation:
    """A live scale-out of 8 vnodes onto PUs 2 and 3, one vnode per step: 8 steps."""
    register_cluster()
    operation = operation_request(
        user=make_user("operator", rescale=True),
        body={
            "changes": {FRAGMENT: {"added_parallel_units": [2, 3]}},
            "granularity": {"vnodes_per_step": 1},
        },
    )
    assert isinstance(operation, RescaleOperation)
    assert operation.steps.count() == 8
    return operation


def step(op: RescaleOperation, number: int, phase: StepPhase, **figures: Any) -> StepProgress:
    spec = op.steps.get(step=number).spec()
    return StepProgress(
        step=number,
        fragment=spec.fragment,
        source_pu=spec.source_pu,
        target_pu=spec.target_pu,
        vnodes=spec.vnodes,
        phase=phase,
        timings={str(phase): 1_700_000_000.5},
        **figures,
    )


def running_report(
    op: RescaleOperation, steps: list[StepProgress], **figures: Any
) -> dict[str, Any]:
    """A running operation's report as the runner sends it, with ``steps`` and ``figures``."""
    return OperationProgress(
        operation_id=op.operation_id,
        strategy=Strategy(op.strategy),
        fragments=tuple(op.fragments),
        status=OperationStatus.RUNNING,
        phase=StopStartPhase.BEGUN,
        begun_epoch=3,
        steps=tuple(steps),
        **figures,
    ).to_json()


def barrier(op: RescaleOperation, steps: list[StepProgress], **figures: Any) -> dict[str, Any]:
    report = running_report(op, steps, **figures)
    operation_progress_record(pipeline=PIPELINE, progress=report)
    return report


def writes(queries: CaptureQueriesContext, table: str) -> list[str]:
    return [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(("INSERT", "UPDATE", "DELETE")) and f'"{table}"' in q["sql"]
    ]


def test_a_barrier_where_one_step_changed_writes_that_step_only(op: RescaleOperation) -> None:
    sent = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    barrier(op, sent)
    assert set(op.steps.values_list("phase", flat=True)) == {"pending"}
    changed = op.steps.get(step=2)
    before = {s.pk: s.updated_at for s in op.steps.all()}

    sent[1] = step(op, 2, StepPhase.COLLECTING, hold_queue=4)
    with CaptureQueriesContext(connection) as queries:
        barrier(op, sent)
    (update,) = writes(queries, "operations_rescalestep")
    # the rows as one JSON array: one row, the step that changed
    assert f'jsonb_to_recordset(\'[{{"id":{changed.pk},"phase"' in update, update
    assert update.count('{"id":') == 1, update
    assert len(writes(queries, "operations_rescaleoperation")) == 1
    assert len(writes(queries, "operations_auditevent")) == 1  # step 2's new phase
    # 7 to record it (the rows of the reported steps, then one UPDATE of those that changed),
    # 3 reads for the delta event, none of them of every step's row: the steps counted (for
    # moved, planned, waiting and steps done), the pipeline and its last epoch (the page's rows
    # are rendered by a watching page's socket, the vnodes come from the changed rows in hand)
    assert len(queries.captured_queries) <= 10, "\n".join(
        q["sql"][:120] for q in queries.captured_queries
    )
    after = {s.pk: s.updated_at for s in op.steps.all()}
    assert [pk for pk in after if after[pk] != before[pk]] == [changed.pk]
    row = op.steps.get(step=2)
    assert (row.phase, row.hold_queue) == ("collecting", 4)

    # figures that changed without a new phase: written, not audited
    sent[1] = step(op, 2, StepPhase.COLLECTING, hold_queue=9, per_vnode={"1": {"keys": 5}})
    with CaptureQueriesContext(connection) as queries:
        barrier(op, sent)
    assert len(writes(queries, "operations_rescalestep")) == 1
    assert writes(queries, "operations_auditevent") == []
    assert op.steps.get(step=2).per_vnode == {"1": {"keys": 5}}

    # nothing changed: no step row is written at all
    with CaptureQueriesContext(connection) as queries:
        barrier(op, sent)
    assert writes(queries, "operations_rescalestep") == []
    assert AuditEvent.objects.filter(action__startswith="step.").count() == 9  # 8 + step 2


def test_a_barrier_where_every_step_changed_writes_one_update_and_one_insert(
    op: RescaleOperation,
) -> None:
    """Eight steps change phase at one barrier: their rows in one UPDATE, their eight audit
    events in one INSERT (a large operation changes hundreds of steps at a barrier)."""
    barrier(op, [step(op, n, StepPhase.PENDING) for n in range(1, 9)])
    sent = [step(op, n, StepPhase.COLLECTING, hold_queue=n) for n in range(1, 9)]
    with CaptureQueriesContext(connection) as queries:
        barrier(op, sent)
    assert len(writes(queries, "operations_rescalestep")) == 1
    assert len(writes(queries, "operations_auditevent")) == 1
    assert list(op.steps.order_by("step").values_list("phase", "hold_queue")) == [
        ("collecting", n) for n in range(1, 9)
    ]
    events = AuditEvent.objects.filter(action="step.collecting").order_by("id")
    assert [e.object_id for e in events] == [f"{op.operation_id}/{n}" for n in range(1, 9)]
    assert all(e.at is not None and e.actor_name == "runner" for e in events)


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Event, dict[str, Any]]]:
    """Every event published, as (group, type, payload)."""
    sent: list[tuple[str, Event, dict[str, Any]]] = []
    monkeypatch.setattr(events, "publish", lambda *event: sent.append(event))
    return sent


def test_each_report_publishes_what_changed_under_the_next_version(
    op: RescaleOperation, published: list[tuple[str, Event, dict[str, Any]]]
) -> None:
    group = f"operation_{op.operation_id}"
    sent = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    barrier(op, sent)
    ((_, kind, first),) = [e for e in published if e[0] == group]
    assert (kind, first["progress_version"]) == (Event.OPERATION_PROGRESS, 1)
    assert [s["step"] for s in first["steps"]] == list(range(1, 9))
    assert "progress" in first["operation"], "the first report is news"

    published.clear()
    sent[1] = step(op, 2, StepPhase.COLLECTING, keys_moved=5, hold_queue=4)
    barrier(op, sent, keys_moved=5)
    ((_, _, delta),) = [e for e in published if e[0] == group]
    assert delta["progress_version"] == 2
    assert [s["step"] for s in delta["steps"]] == [2], "only the step that changed"
    assert delta["steps"][0]["phase"] == "collecting"
    assert [v["vnode"] for v in delta["vnodes"]] == op.steps.get(step=2).vnodes
    assert [e["action"] for e in delta["events"]] == ["step.collecting"]
    assert set(delta["operation"]) == {"keys_moved", "moved", "waiting", "steps_done"}
    assert delta["operation"]["keys_moved"] == 5
    assert delta["operation"]["moved"]["keys"]["moved"] == 5
    # the cluster's event stays the report without its steps
    ((_, _, summary),) = [e for e in published if e[0] == "cluster"]
    assert "steps" not in summary and summary["keys_moved"] == 5

    # the version is the operation's (it survives a restart), and the document says it; the
    # delta's rows are the document's own
    op.refresh_from_db()
    assert op.progress_version == 2
    document = token_client(make_user("viewer")).get(f"/api/v1/operations/{op.operation_id}")
    data = document.json()
    assert data["progress_version"] == 2
    assert [s for s in data["steps"] if s["step"] == 2] == delta["steps"]
    assert [v for v in data["vnodes"] if v["step"] == 2] == delta["vnodes"]
    assert {k: data[k] for k in delta["operation"]} == delta["operation"]

    # nothing changed: a new version that carries no step
    published.clear()
    barrier(op, sent, keys_moved=5)
    ((_, _, empty),) = [e for e in published if e[0] == group]
    assert (empty["progress_version"], empty["steps"], empty["vnodes"]) == (3, [], [])


def test_the_barrier_writes_do_not_grow_with_the_steps_reported(op: RescaleOperation) -> None:
    sent = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    barrier(op, sent[:1])
    collecting = step(op, 1, StepPhase.COLLECTING)
    with CaptureQueriesContext(connection) as one:
        barrier(op, [collecting])
    barrier(op, sent)
    sent[0] = step(op, 1, StepPhase.EXPORTED)
    with CaptureQueriesContext(connection) as eight:
        barrier(op, sent)
    assert len(eight.captured_queries) == len(one.captured_queries)


def test_steps_are_stored_once_and_read_back_as_the_runner_reported_them(
    op: RescaleOperation,
) -> None:
    sent = [
        step(op, 1, StepPhase.DONE, keys_moved=10, bytes_moved=100, collect_epoch=4),
        step(op, 2, StepPhase.COLLECTING, hold_queue=3, per_vnode={"9": {"keys": 2}}),
    ]
    report = barrier(op, sent)
    op.refresh_from_db()
    assert "steps" not in op.progress, "the steps are the rows"
    assert op.progress == {k: v for k, v in report.items() if k != "steps"}
    # what the orchestrator reads: the report again, with the steps the runner knows
    assert operation_progress(op) == report
    assert RescaleStep.objects.filter(operation=op, phase="planned").count() == 6


def test_before_the_first_report_there_is_no_progress(op: RescaleOperation) -> None:
    assert operation_progress(op) is None


def test_reports_stored_with_their_steps_lose_them_in_the_migration(op: RescaleOperation) -> None:
    migration = importlib.import_module(
        "rescaler.operations.migrations.0007_progress_without_steps"
    )
    report = barrier(op, [step(op, 1, StepPhase.PENDING)])
    RescaleOperation.objects.filter(pk=op.pk).update(progress=report)  # as stored before
    migration.drop_steps(apps, None)
    op.refresh_from_db()
    assert op.progress == {k: v for k, v in report.items() if k != "steps"}


# -- deltas: the runner reports the steps changed since the acknowledged report -----------------
def delta(
    op: RescaleOperation, steps: list[StepProgress], *, session: str, version: int, base: int | None
) -> ProgressAck:
    report = running_report(op, steps, session=session, version=version, base_version=base)
    return operation_progress_record(pipeline=PIPELINE, progress=report)


def test_a_delta_updates_its_steps_and_leaves_the_others(op: RescaleOperation) -> None:
    every = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    assert delta(op, every, session="s", version=1, base=None) == ProgressAck(
        op.operation_id, "s", 1
    )
    ack = delta(op, [step(op, 3, StepPhase.COLLECTING)], session="s", version=2, base=1)
    assert ack == ProgressAck(op.operation_id, "s", 2)
    phases = dict(op.steps.values_list("step", "phase"))
    assert phases == {**{n: "pending" for n in range(1, 9)}, 3: "collecting"}


def test_a_delta_on_a_report_not_held_changes_nothing_and_asks_for_a_full_one(
    op: RescaleOperation,
) -> None:
    every = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    delta(op, every, session="s", version=1, base=None)
    op.refresh_from_db()
    version = op.progress_version
    # report 2 was lost: report 3 is a delta on it
    ack = delta(op, [step(op, 4, StepPhase.COLLECTING)], session="s", version=3, base=2)
    assert ack == ProgressAck(op.operation_id, "s", 1, full_wanted=True)
    op.refresh_from_db()
    assert op.progress_version == version
    assert set(op.steps.values_list("phase", flat=True)) == {"pending"}
    # the full report the runner sends at once: the same state as if nothing had been lost
    every[3] = step(op, 4, StepPhase.COLLECTING)
    every[1] = step(op, 2, StepPhase.COLLECTING)
    assert delta(op, every, session="s", version=4, base=None) == ProgressAck(
        op.operation_id, "s", 4
    )
    progress = operation_progress(op)
    assert progress is not None
    assert progress["steps"] == [s.to_json() for s in every]


def test_a_restarted_runner_s_delta_before_its_full_report_is_a_gap(op: RescaleOperation) -> None:
    delta(op, [step(op, 1, StepPhase.PENDING)], session="before", version=9, base=None)
    ack = delta(op, [step(op, 1, StepPhase.COLLECTING)], session="after", version=2, base=1)
    assert ack.full_wanted
    assert delta(op, [step(op, 1, StepPhase.COLLECTING)], session="after", version=3, base=None)
    assert op.steps.get(step=1).phase == "collecting"


def test_a_report_held_already_is_acknowledged_and_not_recorded_again(
    op: RescaleOperation,
) -> None:
    delta(op, [step(op, 1, StepPhase.PENDING)], session="s", version=1, base=None)
    ack = delta(op, [step(op, 1, StepPhase.COLLECTING)], session="s", version=2, base=1)
    op.refresh_from_db()
    version = op.progress_version
    # the same report again (its answer was lost and it was sent again), then an older one
    assert delta(op, [step(op, 1, StepPhase.COLLECTING)], session="s", version=2, base=1) == ack
    assert delta(op, [step(op, 1, StepPhase.PENDING)], session="s", version=1, base=None) == ack
    op.refresh_from_db()
    assert op.progress_version == version
    assert op.steps.get(step=1).phase == "collecting"


def test_the_orchestrator_reads_the_steps_written_since_its_last_read(
    op: RescaleOperation,
) -> None:
    every = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    delta(op, every, session="s", version=1, base=None)
    progress, seen = operation_progress_since(op, 0)
    assert progress is not None and len(progress["steps"]) == 8
    delta(op, [step(op, 6, StepPhase.COLLECTING)], session="s", version=2, base=1)
    progress, now = operation_progress_since(op, seen)
    assert progress is not None and now == seen + 1
    assert [(s["step"], s["phase"]) for s in progress["steps"]] == [(6, "collecting")]
    progress, _ = operation_progress_since(op, now)
    assert progress is not None and progress["steps"] == []


@pytest.mark.parametrize("vnodes", [16, 512])
def test_the_queries_of_a_barrier_do_not_grow_with_the_operation(vnodes: int) -> None:
    """A one-step delta, its delta event included, on operations of 8 and 256 steps: the same
    queries, and no row read but the changed step's."""
    register_cluster(vnodes=vnodes)
    op = operation_request(
        user=make_user("operator", rescale=True),
        body={
            "changes": {FRAGMENT: {"added_parallel_units": [2, 3]}},
            "granularity": {"vnodes_per_step": 1},
        },
    )
    assert isinstance(op, RescaleOperation) and op.steps.count() == vnodes // 2
    every = [step(op, n, StepPhase.PENDING) for n in range(1, vnodes // 2 + 1)]
    delta(op, every, session="s", version=1, base=None)
    collecting = step(op, 2, StepPhase.COLLECTING)
    rows_read: list[int] = []

    def count_rows(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if sql.startswith("SELECT") and '"operations_rescalestep"' in sql:
            rows_read.append(context["cursor"].rowcount)
        return result

    with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(count_rows):
        delta(op, [collecting], session="s", version=2, base=1)
    # 10: the page's HTML (4 more) is rendered by a watching page's socket, not here; the
    # changed steps' vnodes come from their rows in hand; the planned figures are counted with
    # the steps (the plan, megabytes at this size, is not read)
    assert len(queries.captured_queries) == 10, "\n".join(
        q["sql"][:120] for q in queries.captured_queries
    )
    # the changed step's row (read to record it, and for its vnodes), and a few counted rows
    assert sum(rows_read) <= 10, rows_read


def test_what_the_operation_holds_reads_as_a_whole_report(op: RescaleOperation) -> None:
    every = [step(op, n, StepPhase.PENDING) for n in range(1, 9)]
    delta(op, every, session="s", version=1, base=None)
    delta(op, [step(op, 3, StepPhase.COLLECTING)], session="s", version=2, base=1)
    progress = operation_progress(op)
    assert progress is not None
    whole = OperationProgress.from_json(progress)
    assert not whole.delta and (whole.session, whole.version) == ("s", 2)
    assert len(whole.steps) == 8


def test_the_planned_figures_are_the_plan_s_however_they_are_read(op: RescaleOperation) -> None:
    """A barrier reads the operation without its plan (megabytes at 16,384 moves): the planned
    keys, bytes and vnodes its delta says are its steps' sums, counted with the steps (they
    partition the plan's moves); without steps, Postgres sums the plan's. Every way equals the
    plan's own figures."""
    from rescaler.operations.counts import StepCounts, step_counts
    from rescaler.operations.selectors import planned_moves

    RescaleStep.objects.filter(operation=op, step=1).update(keys=7, bytes=700)
    RescaleStep.objects.filter(operation=op).exclude(step=1).update(keys=1, bytes=100)
    fragment = {"keys_moved": 14, "bytes_moved": 1400, "vnodes_moved": 8}
    RescaleOperation.objects.filter(pk=op.pk).update(plan={"fragments": {FRAGMENT: fragment}})
    expected = {"keys": 14, "bytes": 1400, "vnodes": 8}
    whole = RescaleOperation.objects.get(pk=op.pk)
    without = RescaleOperation.objects.defer("plan").get(pk=op.pk)
    assert planned_moves(whole) == expected
    assert planned_moves(without, step_counts(without)) == expected
    assert planned_moves(whole, StepCounts.of_rows(whole.steps.all())) == expected
    with CaptureQueriesContext(connection) as queries:
        assert planned_moves(without) == expected  # no steps counted: Postgres sums the plan
    assert len(queries.captured_queries) == 1
    assert "plan" in without.get_deferred_fields(), "the plan itself was not read"


def test_a_barrier_is_recorded_with_the_cycle_collector_paused(op: RescaleOperation) -> None:
    """A barrier's rows, audit events and delta are freed together at its end: recorded with
    the collector off (workers.cycles), which is on again after, and left off if it was off."""
    import gc

    from rescaler.operations.signals import operation_progressed

    seen: list[bool] = []

    def receiver(sender: Any, **report: Any) -> None:
        seen.append(gc.isenabled())

    operation_progressed.connect(receiver, dispatch_uid="test.collector")
    try:
        assert gc.isenabled()
        barrier(op, [step(op, n, StepPhase.PENDING) for n in range(1, 9)])
        assert gc.isenabled()
        gc.disable()
        try:
            barrier(op, [step(op, n, StepPhase.COLLECTING) for n in range(1, 9)])
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        operation_progressed.disconnect(dispatch_uid="test.collector")
    assert seen == [False, False]


def test_an_orchestrator_tick_runs_with_the_cycle_collector_paused(op: RescaleOperation) -> None:
    import gc

    from rescaler.operations import drive

    class Orchestrator:
        collecting: bool | None = None

        def tick(self) -> str:
            self.collecting = gc.isenabled()
            return "ticked"

    orchestrator = Orchestrator()
    assert drive.orchestrator_tick(orchestrator) == "ticked"  # type: ignore[arg-type]
    assert orchestrator.collecting is False
    assert gc.isenabled()
