"""Runner commands: one writer (``command_submit``), each row audited in its transaction, and an
operation's cancel written once whoever sends it (issue 23, "One writer of runner commands,
audited. Cancel is sent once")."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import pytest

from rescaler.audit.models import AuditEvent
from rescaler.cluster import snapshots
from rescaler.cluster.models import Pipeline, RunnerCommand
from rescaler.operations import drive
from rescaler.operations.cancel import operation_cancel, operation_cancel_command
from rescaler.operations.models import RescaleOperation
from rescaler.operations.progress import operation_progress_record
from rescaler.operations.requests import operation_request
from rescaler.runner.workers import worker_drain
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from workers.rescale.protocol import (
    CommandKind,
    OperationProgress,
    OperationRef,
    OperationStatus,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
CANCEL = CommandKind.OPERATION_CANCEL


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)


@pytest.fixture
def cluster() -> Pipeline:
    """word_count on w1's PUs 0 and 1; w2 (PUs 2, 3) and w3 (PUs 4, 5) run nothing yet."""
    return register_cluster(workers={"w1": [0, 1], "w2": [2, 3], "w3": [4, 5]})


@pytest.fixture
def user() -> Any:
    return make_user("operator", rescale=True)


def started(user: Any) -> RescaleOperation:
    """A live operation onto PUs 2 and 3 whose begin the runner took: it reports progress."""
    op = operation_request(
        user=user,
        body={
            "changes": {FRAGMENT: {"added_parallel_units": [2, 3]}},
            "granularity": {"vnodes_per_step": 2},
        },
    )
    assert isinstance(op, RescaleOperation)
    report(op)
    return op


def report(op: RescaleOperation, *steps: dict[str, Any]) -> None:
    operation_progress_record(
        pipeline=PIPELINE,
        progress={
            **OperationProgress(
                operation_id=op.operation_id,
                strategy=Strategy(op.strategy),
                fragments=tuple(op.fragments),
                status=OperationStatus.RUNNING,
                phase=StopStartPhase.BEGUN,
            ).to_json(),
            "steps": list(steps),
        },
    )


def stuck_step(op: RescaleOperation) -> dict[str, Any]:
    spec = op.steps.get(step=1).spec()
    return StepProgress(
        step=1,
        fragment=spec.fragment,
        source_pu=spec.source_pu,
        target_pu=spec.target_pu,
        vnodes=spec.vnodes,
        phase=StepPhase.COLLECTING,
        timings={StepPhase.COLLECTING: time.time() - 600},
    ).to_json()


def audit_of(command: RunnerCommand) -> AuditEvent:
    """The command's one audit event (its ``after`` names the command)."""
    (event,) = AuditEvent.objects.filter(after__command=command.id)
    return event


def cancels(op: RescaleOperation) -> list[RunnerCommand]:
    return list(RunnerCommand.objects.filter(kind=CANCEL, payload__operation_id=op.operation_id))


def test_every_path_that_submits_a_command_leaves_one_audited_row(
    cluster: Pipeline, user: Any, settings: Any, tmp_path: Path
) -> None:
    settings.STATE_DIR = tmp_path / "state"
    # the drive loop: begin, the first steps and (all issued) finish
    op = started(user)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    # a user's cancel
    operation_cancel(user=user, operation=op)
    # a drain (w3 runs nothing: decommissioned at once) and a snapshot
    worker_drain(user=user, name="w3", reason="not needed")
    snapshots.snapshot_request(user=user, pipeline=PIPELINE, reason="before the upgrade")

    commands = list(RunnerCommand.objects.order_by("id"))
    assert {c.kind for c in commands} >= {
        CommandKind.OPERATION_BEGIN,
        CommandKind.OPERATION_STEP,
        CommandKind.OPERATION_CANCEL,
        CommandKind.WORKER_DECOMMISSION,
        CommandKind.SNAPSHOT,
    }
    events = {c.kind: audit_of(c) for c in commands}
    begin = events[CommandKind.OPERATION_BEGIN]
    assert (begin.action, begin.actor_name) == ("command.operation.begin", "orchestrator")
    assert events[CommandKind.OPERATION_STEP].object_id == op.operation_id
    assert events[CommandKind.OPERATION_CANCEL].actor == user
    assert events[CommandKind.OPERATION_CANCEL].object_type == "operation"
    decommission = events[CommandKind.WORKER_DECOMMISSION]
    assert (decommission.action, decommission.object_id, decommission.actor) == (
        "worker.decommissioning",
        "w3",
        user,
    )
    assert (decommission.after or {})["status"] == "decommissioning"
    snapshot = events[CommandKind.SNAPSHOT]
    assert (snapshot.action, snapshot.actor) == ("snapshot.requested", user)
    assert (snapshot.after or {})["reason"] == "before the upgrade"
    assert next(c for c in commands if c.kind == CANCEL).created_by == user


def test_cancelling_twice_writes_one_command(cluster: Pipeline, user: Any) -> None:
    op = started(user)
    operation_cancel(user=user, operation=op)
    (command,) = cancels(op)
    # another operator, the drive loop relaying the cancel, and the orchestrator's watchdog
    operation_cancel(user=make_user("second", rescale=True), operation=op)
    drive.OrmChannel(op).submit(CANCEL, OperationRef(op.operation_id).to_json())
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    assert cancels(op) == [command]
    event = audit_of(command)
    assert (event.action, event.actor, event.actor_name) == (
        "command.operation.cancel",
        user,
        "operator",
    )
    assert AuditEvent.objects.filter(action="command.operation.cancel").count() == 1


def test_a_cancel_the_runner_must_still_hear_of_is_sent_in_the_name_of_who_asked(
    cluster: Pipeline, user: Any
) -> None:
    """Cancelled before the runner reported anything: no command yet; the drive loop sends it
    (once), and the audit names the operator, not the orchestrator that relayed it."""
    op = operation_request(user=user, body={"changes": {FRAGMENT: {"added_parallel_units": [2]}}})
    assert isinstance(op, RescaleOperation)
    operation_cancel(user=user, operation=op)
    assert cancels(op) == []
    channel = drive.OrmChannel(op)
    first = channel.submit(CANCEL, OperationRef(op.operation_id).to_json())
    assert channel.submit(CANCEL, OperationRef(op.operation_id).to_json()) == first
    (command,) = cancels(op)
    assert command.id == first and command.created_by == user
    assert audit_of(command).actor == user


def test_the_watchdog_and_its_audited_cancel_send_one_command(
    cluster: Pipeline, user: Any, settings: Any
) -> None:
    settings.RESCALER_STEP_TIMEOUT_S = 1
    op = started(user)
    report(op, stuck_step(op))
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    op.refresh_from_db()
    assert op.status == "cancelling"
    (command,) = cancels(op)
    event = audit_of(command)
    assert event.actor is None and event.actor_name == "orchestrator"
    operation_cancel(user=user, operation=op)
    assert cancels(op) == [command]


def test_a_cancel_the_runner_refused_may_be_sent_again(cluster: Pipeline, user: Any) -> None:
    op = started(user)
    operation_cancel(user=user, operation=op)
    (refused,) = cancels(op)
    RunnerCommand.objects.filter(pk=refused.pk).update(status=RunnerCommand.Status.FAILED)
    again = operation_cancel_command(operation=op)
    assert again.pk != refused.pk and len(cancels(op)) == 2
    assert audit_of(again).actor == user


# -- the one writer, as a contract -----------------------------------------------------------------
WRITES = {"create", "bulk_create", "get_or_create", "update_or_create"}
WRITER = ("rescaler/cluster/services.py", "commands_submit")  # command_submit: one of them


def command_writes(path: Path) -> list[tuple[str, int]]:
    """Where a file writes RunnerCommand rows: ``RunnerCommand(...)`` or
    ``RunnerCommand.objects.<create...>(...)``, as (enclosing function, line)."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Name) and func.id == "RunnerCommand":
                    found.append((name, child.lineno))
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr in WRITES
                    and isinstance(func.value, ast.Attribute)
                    and func.value.attr == "objects"
                    and isinstance(func.value.value, ast.Name)
                    and func.value.value.id == "RunnerCommand"
                ):
                    found.append((name, child.lineno))
            visit(child, name)

    visit(ast.parse(path.read_text()), "")
    return found


def test_command_submit_is_the_one_writer_of_runner_commands() -> None:
    writers = [
        (str(path.relative_to(ROOT)), function, line)
        for package in ("rescaler", "dashboard", "workers")
        for path in sorted((ROOT / package).rglob("*.py"))
        for function, line in command_writes(path)
    ]
    assert sorted({(p, f) for p, f, _ in writers}) == [WRITER], writers


def test_the_contract_finds_a_second_writer(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "def f():\n    RunnerCommand.objects.create(kind='stop')\n"
        "def g():\n    return RunnerCommand(kind='stop')\n"
    )
    assert command_writes(source) == [("f", 2), ("g", 4)]


def test_a_barrier_acks_its_commands_in_one_write(
    cluster: Pipeline, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner acks every command of a barrier at once (``ack_commands``): one UPDATE and
    one commit, however many steps the barrier took; each command keeps its own outcome."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rescaler.runner import control
    from rescaler.runner.control import OrmControl

    # OrmControl refreshes old connections first: in a test that would close the test's own
    monkeypatch.setattr(control, "close_old_connections", lambda: None)

    op = started(user)
    assert drive.operation_drive(pk=op.id, budget_s=0.3, poll_s=0.05) == "continue"
    pending = OrmControl().poll_commands(PIPELINE)
    assert len(pending) >= 3
    acks = [(c.id, "done", f"applied {c.kind}") for c in pending[:-1]]
    acks.append((pending[-1].id, "failed", "refused: a test"))
    with CaptureQueriesContext(connection) as queries:
        OrmControl().ack_commands(acks)
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1, updates
    rows = RunnerCommand.objects.in_bulk([a[0] for a in acks])
    assert [(rows[i].status, rows[i].detail) for i, _, _ in acks] == [
        (status, detail) for _, status, detail in acks
    ]
    assert all(rows[i].acked_at is not None for i, _, _ in acks)
    assert OrmControl().poll_commands(PIPELINE) == []
