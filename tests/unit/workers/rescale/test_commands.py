"""Operation commands the runner refuses before anything changes (workers/rescale/commands.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.control import Command
from workers.pipeline.placement import VnodeMapping
from workers.rescale.commands import CommandHandler, CommandRefused
from workers.rescale.ledger import OperationLedger
from workers.rescale.protocol import BeginPayload, CommandKind, FragmentBegin, Strategy


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
