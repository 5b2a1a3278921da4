"""What an audit event's before/after and a websocket message say of an operation."""

from __future__ import annotations

from typing import Any

from rescaler.operations.models import RescaleOperation
from workers.rescale.protocol import OperationStatus, OperationSummary, Strategy


def operation_summary(op: RescaleOperation) -> dict[str, Any]:
    """What an event's before/after and a websocket message say of an operation."""
    return OperationSummary(
        operation_id=op.operation_id,
        status=OperationStatus(op.status),
        strategy=Strategy(op.strategy),
        fragments=tuple(op.fragments),
        vnodes_moved=op.vnodes_moved,
        keys_moved=op.keys_moved,
    ).to_json()
