"""Why a rescale is refused or fails. Each refusal has a stable machine-readable ``code``."""

from __future__ import annotations


class RescaleError(Exception):
    """Base class: a rescale that cannot be carried out, with the reason."""

    code = "rescale_error"


class MalformedRequest(RescaleError):
    code = "malformed_request"


class UnknownFragment(RescaleError):
    code = "unknown_fragment"


class NotStateful(RescaleError):
    code = "fragment_not_stateful"


class UnknownParallelUnit(RescaleError):
    code = "unknown_parallel_unit"


class DeadWorker(RescaleError):
    code = "parallel_unit_on_dead_worker"


class WorkerNotActive(RescaleError):
    """An added PU's worker is cordoned, draining or leaving: no new vnodes go to it."""

    code = "worker_not_active"


class WorkerNotBootstrapped(RescaleError):
    """An added PU's worker joined, but the runner has not created its PUs' stores yet."""

    code = "worker_not_bootstrapped"


class ParallelUnitLost(RescaleError):
    """An added PU's worker disappeared; its vnodes can only be moved off it."""

    code = "parallel_unit_lost"


class ParallelUnitRemoved(RescaleError):
    """An added PU left the cluster with its drained worker."""

    code = "parallel_unit_removed"


class AlreadyInFragment(RescaleError):
    code = "parallel_unit_already_in_fragment"


class NotInFragment(RescaleError):
    code = "parallel_unit_not_in_fragment"


class RemovesEveryUnit(RescaleError):
    code = "removes_every_parallel_unit"


class AddedAndRemoved(RescaleError):
    code = "parallel_unit_added_and_removed"


class FragmentBusy(RescaleError):
    code = "fragment_busy"


class NothingToDo(RescaleError):
    code = "nothing_to_do"


class UnknownOperation(RescaleError):
    code = "unknown_operation"


class OperationFailed(RescaleError):
    code = "operation_failed"
