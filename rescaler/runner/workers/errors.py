"""The refusals of worker actions, turned into a 4xx by the API like the rest."""

from __future__ import annotations

from workers.rescale import errors


class WorkerError(errors.RescaleError):
    """Base of the refusals of worker actions (turned into a 4xx by the API, like the rest)."""

    code = "worker_error"


class UnknownWorker(WorkerError):
    code = "unknown_worker"


class WorkerStatusConflict(WorkerError):
    """The worker's status does not allow the action (cordon a lost worker, drain twice...)."""

    code = "worker_status_conflict"


class DrainEmptiesFragment(WorkerError):
    """The worker runs every PU of a fragment: draining it would leave the fragment none."""

    code = "drain_empties_fragment"


class ProviderRefused(WorkerError):
    """The worker provider cannot add a worker (none configured, the command failed...)."""

    code = "worker_provider_refused"
