"""Services of the autoscaler: changing a pipeline's policy (validated and audited)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from rescaler.audit.services import audit_record
from rescaler.autoscaling.errors import PolicyInvalid, UnknownPipeline
from rescaler.autoscaling.model import Mode, Policy, policy_problems
from rescaler.autoscaling.models import AutoscalingPolicy
from rescaler.autoscaling.selectors import policy_json
from rescaler.cluster.models import Pipeline
from workers.rescale.protocol import AuditObject

POLICY_SETTINGS = tuple(f.name for f in dataclasses.fields(Policy))


@transaction.atomic
def autoscaling_policy_update(*, user: Any, pipeline: str, changes: Mapping[str, Any]) -> Policy:
    """Set the settings of ``changes`` in the pipeline's policy (the others keep their value)
    and record it (``autoscaling.policy_updated``, before and after); a policy with a problem
    is refused whole (``PolicyInvalid``, nothing changes), one that changes nothing records
    nothing."""
    unknown = set(changes) - set(POLICY_SETTINGS)
    if unknown:
        raise PolicyInvalid({name: "not a setting of the policy" for name in sorted(unknown)})
    row = Pipeline.objects.locked().filter(name=pipeline).first()
    if row is None:
        raise UnknownPipeline(f"no pipeline named {pipeline!r} has registered")
    stored, _ = AutoscalingPolicy.objects.select_for_update().get_or_create(pipeline=row)
    before = stored.policy()
    values = dict(changes)
    if "mode" in values:
        values["mode"] = Mode(values["mode"])
    if "scale_in_blackout_hours" in values:
        values["scale_in_blackout_hours"] = tuple(sorted(values["scale_in_blackout_hours"]))
    after = dataclasses.replace(before, **values)
    problems = policy_problems(after)
    if problems:
        raise PolicyInvalid(problems)
    if after == before:
        return after
    for name in POLICY_SETTINGS:
        setattr(stored, name, getattr(after, name))
    stored.mode = after.mode.value
    stored.scale_in_blackout_hours = list(after.scale_in_blackout_hours)
    stored.updated_by = user if user is not None and user.is_authenticated else None
    stored.save()
    audit_record(
        actor=user,
        action="autoscaling.policy_updated",
        obj=(AuditObject.PIPELINE, pipeline),
        before=policy_json(before),
        after=policy_json(after),
    )
    return after
