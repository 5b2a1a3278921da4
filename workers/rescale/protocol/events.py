"""What the control plane publishes (websocket events) and audits (object types)."""

from __future__ import annotations

import enum


class Event(enum.StrEnum):
    """Every websocket event type (``rescaler.events.publish``): the one list. Each has a
    handler on every consumer (``dashboard.consumers``), so no event can close a socket."""

    EPOCH_COMMITTED = "epoch.committed"
    OPERATION_REQUESTED = "operation.requested"
    OPERATION_PROGRESS = "operation.progress"
    OPERATION_CANCELLING = "operation.cancelling"
    OPERATION_FINISHED = "operation.finished"
    # elastic workers (docs/elastic-workers.md); the payload is the worker's summary
    WORKER_JOINED = "worker.joined"
    WORKER_LOST = "worker.lost"
    WORKER_REMOVED = "worker.removed"
    WORKER_STATUS = "worker.status"  # any other change: cordoned, draining, bootstrapped...


class AuditObject(enum.StrEnum):
    """The ``object_type`` of audit events; a step's ``object_id`` is ``<operation_id>/<step>``."""

    OPERATION = "operation"
    STEP = "step"
    WORKER = "worker"  # object_id: the worker's name
    PIPELINE = "pipeline"  # object_id: the pipeline's name
