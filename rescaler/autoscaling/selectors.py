"""Read-side queries of the autoscaler: a pipeline's policy."""

from __future__ import annotations

import dataclasses
from typing import Any

from rescaler.autoscaling.errors import UnknownPipeline
from rescaler.autoscaling.model import Policy
from rescaler.autoscaling.models import AutoscalingPolicy
from rescaler.cluster.models import Pipeline


def pipeline_get(*, name: str) -> Pipeline:
    pipeline = Pipeline.objects.filter(name=name).first()
    if pipeline is None:
        raise UnknownPipeline(f"no pipeline named {name!r} has registered")
    return pipeline


def autoscaling_policy_get(*, pipeline: Pipeline) -> Policy:
    """The pipeline's policy; the default one (mode off) while none was ever set."""
    row = AutoscalingPolicy.objects.filter(pipeline=pipeline).first()
    return row.policy() if row is not None else Policy()


def policy_json(policy: Policy) -> dict[str, Any]:
    """A policy as the API and the audit trail show it."""
    data = dataclasses.asdict(policy)
    data["mode"] = policy.mode.value
    data["scale_in_blackout_hours"] = list(policy.scale_in_blackout_hours)
    return data
