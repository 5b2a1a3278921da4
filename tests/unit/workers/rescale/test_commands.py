"""Operation commands the runner refuses before anything changes (workers/rescale/commands.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.control import Command
from workers.pipeline.placement import VnodeMapping
from workers.rescale.commands import CommandHandler, CommandRefused
from workers.rescale.ledger import OperationLedger
from workers.rescale.protocol import (
    BeginPayload,
    CommandKind,
    FragmentBegin,
    StepPayload,
    StepSpec,
    Strategy,
)


def test_a_begin_onto_a_pu_without_an_executor_is_refused_saying_why_and_what_to_do(
    tmp_path: Path,
) -> None:
    """The soak's one failed operation (issue 24): the API accepted PU 7 while the old runner's
    heartbeat still showed it; the runner, restarted meanwhile, had no executor for its worker
    yet and refused "parallel units [7] do not exist", which they did."""
    ledger = OperationLedger(tmp_path, {"f": VnodeMapping("f", (0, 1), (0, 1, 0, 1))})
    handler = CommandHandler(ledger, {0, 1})
    begin = BeginPayload(
        "op1", Strategy.LIVE, {"f": FragmentBegin((7,), (1,), (0, 7), (0, 7, 0, 7))}
    )
    with pytest.raises(CommandRefused) as refused:
        handler.handle(Command(1, CommandKind.OPERATION_BEGIN, begin.to_json()))
    message = str(refused.value)
    assert "parallel units [7] have no executor on this runner" in message
    assert "alive" in message and "again" in message
    assert "op1" not in ledger.ops, "nothing begun"


def test_a_step_refused_mid_operation_cancels_it_with_the_reason(tmp_path: Path) -> None:
    """A step onto a PU whose worker was lost after the operation began is refused; the
    orchestrator never learns a refused step's fate (its steps are sent in waves, their acks
    unread), so the operation waited for it for ever (a soak in CI: "operations still
    unfinished 600s after the end"). The refusal now cancels the operation, with the reason:
    held steps go back, no new step starts, and it ends cancelled."""
    ledger = OperationLedger(tmp_path, {"f": VnodeMapping("f", (0, 1), (0, 1, 0, 1))})
    handler = CommandHandler(ledger, {0, 1, 2})
    begin = BeginPayload(
        "op1", Strategy.LIVE, {"f": FragmentBegin((2,), (), (0, 1, 2), (0, 1, 2, 1))}
    )
    handler.handle(Command(1, CommandKind.OPERATION_BEGIN, begin.to_json()))
    handler.worker_pus = {0, 1}  # PU 2's worker is lost
    step = StepPayload("op1", StepSpec(1, "f", 0, 2, (2,), 10, 100))
    with pytest.raises(CommandRefused, match="target PU 2 does not exist"):
        handler.handle(Command(2, CommandKind.OPERATION_STEP, step.to_json()))
    op = ledger.ops["op1"]
    assert op.cancel_requested and not op.steps
    assert "step 1: target PU 2 does not exist" in op.error and "cancelled" in op.error
    # a refusal of a step of an operation already ending changes nothing
    with pytest.raises(CommandRefused, match="no new step may start"):
        handler.handle(Command(3, CommandKind.OPERATION_STEP, step.to_json()))
    assert ledger.ops["op1"].error == op.error


def test_a_stray_step_of_a_stop_start_is_refused_and_cancels_nothing(tmp_path: Path) -> None:
    ledger = OperationLedger(tmp_path, {"f": VnodeMapping("f", (0, 1), (0, 1, 0, 1))})
    handler = CommandHandler(ledger, {0, 1, 2})
    begin = BeginPayload(
        "op2", Strategy.STOP_START, {"f": FragmentBegin((2,), (), (0, 1, 2), (0, 1, 2, 1))}
    )
    handler.handle(Command(1, CommandKind.OPERATION_BEGIN, begin.to_json()))
    step = StepPayload("op2", StepSpec(1, "f", 0, 2, (2,), 10, 100))
    with pytest.raises(CommandRefused, match="it has no steps"):
        handler.handle(Command(2, CommandKind.OPERATION_STEP, step.to_json()))
    assert not ledger.ops["op2"].cancel_requested and not ledger.ops["op2"].error


def test_a_command_for_an_ended_operation_reports_its_end_again(tmp_path: Path) -> None:
    """The soak (CI, seed 7): the runner, killed in the barrier that completed an operation,
    had settled it but its final report never reached the control plane, and no later report
    would carry it; the driver re-sent begin and finish every 20 s, the runner answered
    "already completed", and the operation stayed running for ever. A command for an ended,
    settled operation now sends its whole final report again, so the control plane's view
    ends equal to the runner's."""
    from workers.rescale.ledger import mark_settled
    from workers.rescale.protocol import OperationStatus

    sent: list[dict[str, object]] = []
    placements = {"f": VnodeMapping("f", (0, 1), (0, 1, 0, 1))}
    ledger = OperationLedger(tmp_path, placements, report=lambda p: sent.append(p) or None)
    handler = CommandHandler(ledger, {0, 1, 2})
    begin = BeginPayload(
        "op1", Strategy.LIVE, {"f": FragmentBegin((2,), (), (0, 1, 2), (0, 1, 2, 1))}
    )
    handler.handle(Command(1, CommandKind.OPERATION_BEGIN, begin.to_json()))
    op = ledger.ops["op1"]
    op.finish_requested = True
    op.status = OperationStatus.COMPLETED
    ledger.store.save(op)  # final, as the killed runner left it: saved, its report lost
    mark_settled(tmp_path, "op1")
    sent.clear()
    for n, kind, payload in (
        (2, CommandKind.OPERATION_BEGIN, begin.to_json()),
        (3, CommandKind.OPERATION_FINISH, {"operation_id": "op1"}),
    ):
        assert "already" in handler.handle(Command(n, kind, payload))
    assert [p["status"] for p in sent] == ["completed", "completed"]
    assert all(p["base_version"] is None for p in sent), "whole reports, not deltas"

    # not settled yet (its placement not durable): its end is not told before it is
    ledger2 = OperationLedger(tmp_path / "b", placements, report=lambda p: sent.append(p) or None)
    handler2 = CommandHandler(ledger2, {0, 1, 2})
    handler2.handle(Command(1, CommandKind.OPERATION_BEGIN, begin.to_json()))
    op2 = ledger2.ops["op1"]
    op2.status = OperationStatus.COMPLETED
    ledger2.store.save(op2)
    sent.clear()
    handler2.handle(Command(2, CommandKind.OPERATION_FINISH, {"operation_id": "op1"}))
    assert sent == []
