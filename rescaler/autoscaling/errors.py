"""The autoscaler's refusals, each a 4xx with its code at the API's edge."""

from __future__ import annotations

from typing import Any

from workers.rescale import errors


class AutoscalingError(errors.RescaleError):
    """Base class of the autoscaler's refusals."""


class UnknownPipeline(AutoscalingError):
    code = "unknown_pipeline"


class NotEnoughParallelUnits(AutoscalingError):
    """Auto mode: the decision needs more PUs than the cluster has free (add workers)."""

    code = "not_enough_parallel_units"


class NothingToStart(AutoscalingError):
    """Auto mode: the decision has no request to start (a rebalance at the same size)."""

    code = "nothing_to_start"


class PolicyInvalid(AutoscalingError):
    """A policy that cannot be kept: each of ``problems`` names a setting and what is wrong."""

    code = "invalid_policy"

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {why}" for name, why in problems.items()))
        self.problems = problems

    def details(self) -> dict[str, Any]:
        """What the error body says beside ``code`` and ``detail``: the first setting in
        ``field``, every one in ``errors``."""
        return {
            "field": next(iter(self.problems)),
            "errors": {name: [why] for name, why in self.problems.items()},
        }
