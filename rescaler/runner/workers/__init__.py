"""Elastic workers, the control plane's half (docs/elastic-workers.md): the facade the API,
the pages and the runner's control channel call. One module per concern:

- ``reports``: what the runner reports (``workers_record``: joins, losses, removals;
  ``worker_command_acked``: a refused decommission);
- ``cordons`` and ``drains``: what operators ask (``worker_cordon``, ``worker_uncordon``,
  ``worker_drain``), and how a drain ends (``worker_drain_settled``, the receiver of
  ``rescaler.operations.signals.operation_finished``);
- ``notices``: preemption notices (``worker_notice``: cordon at once, drain with priority;
  ``notice_drains_resume``: the drains that waited for a busy fragment, when an operation ends);
- ``machines``: the worker provider (``worker_add``, ``worker_release``), and ``tasks``: the
  release as a Celery task with retries;
- ``changes``: one change of a worker, saved, audited (object type ``worker``) and published to
  the ``cluster`` group the same way by all of them; ``errors``: the refusals.
"""

from rescaler.runner.workers.changes import worker_get, worker_summary
from rescaler.runner.workers.cordons import worker_cordon, worker_uncordon
from rescaler.runner.workers.drains import (
    WorkerDrain,
    drain_request,
    worker_drain,
    worker_drain_settled,
)
from rescaler.runner.workers.errors import (
    DrainEmptiesFragment,
    ProviderRefused,
    UnknownWorker,
    WorkerError,
    WorkerStatusConflict,
)
from rescaler.runner.workers.machines import (
    CORES_MAX,
    CORES_MIN,
    WorkerAdded,
    cores_parse,
    worker_add,
    worker_release,
)
from rescaler.runner.workers.notices import (
    NOTICE_ORIGINS,
    WorkerNotice,
    deadline_parse,
    notice_drains_resume,
    worker_notice,
)
from rescaler.runner.workers.reports import worker_command_acked, workers_record

__all__ = [
    "CORES_MAX",
    "CORES_MIN",
    "NOTICE_ORIGINS",
    "DrainEmptiesFragment",
    "ProviderRefused",
    "UnknownWorker",
    "WorkerAdded",
    "WorkerDrain",
    "WorkerError",
    "WorkerNotice",
    "WorkerStatusConflict",
    "cores_parse",
    "deadline_parse",
    "drain_request",
    "notice_drains_resume",
    "worker_add",
    "worker_command_acked",
    "worker_cordon",
    "worker_drain",
    "worker_drain_settled",
    "worker_get",
    "worker_notice",
    "worker_release",
    "worker_summary",
    "worker_uncordon",
    "workers_record",
]
