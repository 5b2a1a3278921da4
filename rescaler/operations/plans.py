"""A binding dry run: the plan a dry run answers is kept, and starting its ``plan_id`` starts
exactly that plan, or is refused with what changed since (docs/api.md, "A binding dry run").

A plan is bound to the request it answered (the body, but ``dry_run``), to the mapping version
and the parallel units of each of its fragments when it was computed, and to the user who asked.
It starts one operation at most, and only until it expires (``RESCALER_PLAN_TTL_S``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from rescaler.cluster.models import Fragment, Pipeline
from rescaler.operations.models import PLAN_ID_CHARS, OperationPlan, plan_detail_dump
from workers.rescale import errors
from workers.rescale.protocol import REQUEST_FIELDS, OperationRequest, Plan
from workers.rescale.request import ClusterView

# kept this long after they expire, so that a late start hears "expired", not "unknown"
EXPIRED_KEPT = dt.timedelta(days=1)


class PlanError(errors.RescaleError):
    """A refusal about the ``plan_id`` of a request: the field it concerns, and what changed."""

    field = "plan_id"

    def details(self) -> dict[str, Any]:
        """What the error body says beside ``code`` and ``detail``."""
        return {"field": self.field}


class UnknownPlan(PlanError):
    code = "unknown_plan"


class PlanStale(PlanError):
    """The plan may not start any more: each entry of ``changed`` says why."""

    code = "plan_stale"

    def __init__(self, message: str, changed: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.changed = changed or []

    def details(self) -> dict[str, Any]:
        return {**super().details(), "changed": self.changed}


def plan_id_parse(value: Any) -> str:
    """A ``plan_id`` as a client sends it: the hex text a dry run answered."""
    if (
        not isinstance(value, str)
        or len(value) != PLAN_ID_CHARS
        or any(c not in "0123456789abcdef" for c in value)
    ):
        raise errors.MalformedRequest(
            f"'plan_id' must be the {PLAN_ID_CHARS} hex characters a dry run answered"
        )
    return value


def mapping_versions(pipeline: Pipeline, fragments: list[str]) -> dict[str, int]:
    """The current mapping version of each of these fragments (absent: no such fragment)."""
    rows = Fragment.objects.filter(pipeline=pipeline, name__in=fragments)
    return dict(rows.values_list("name", "mapping_version"))


def plan_store(
    *,
    user: Any,
    pipeline: Pipeline,
    request: OperationRequest,
    plan: Plan,
    versions: dict[str, int],
) -> OperationPlan:
    """Keep a dry run's plan under a new ``plan_id`` (and forget those long expired)."""
    now = timezone.now()
    OperationPlan.objects.filter(expires_at__lt=now - EXPIRED_KEPT).delete()
    return OperationPlan.objects.create(
        pipeline=pipeline,
        requested_by=user if user is not None and user.is_authenticated else None,
        request={**request.to_json(), "dry_run": False},
        plan=plan.summary_json(),
        detail=plan_detail_dump(plan),
        mapping_versions=versions,
        expires_at=now + dt.timedelta(seconds=settings.RESCALER_PLAN_TTL_S),
    )


def plan_transfers(stored: OperationPlan) -> dict[str, list[tuple[int, int, list[int], int, int]]]:
    """Per fragment of a kept plan, its moves per (source PU, target PU) in the order they
    first come (by vnode): the vnodes, keys and bytes of each, for a page that shows them
    (a dry run's answer sums them per PU)."""
    found: dict[str, list[tuple[int, int, list[int], int, int]]] = {}
    for name, fragment in stored.plan_record().fragments.items():
        pairs: dict[tuple[int, int], list[Any]] = {}
        for move in fragment.moves:
            pair = pairs.setdefault((move.source_pu, move.target_pu), [[], 0, 0])
            pair[0].append(move.vnode)
            pair[1] += move.keys
            pair[2] += move.bytes
        found[name] = [(s, t, v, k, b) for (s, t), (v, k, b) in pairs.items()]
    return found


def plan_locked(*, user: Any, plan_id: str) -> OperationPlan:
    """The user's plan of that id, locked until the transaction ends (two starts of one plan
    are serialised: the second finds it used). No user: a plan no user asked for, the one a
    component of the control plane planned by itself (the autoscaler in auto mode); the API
    and the console always have a signed-in user."""
    mine = (
        Q(requested_by=user)
        if user is not None and user.is_authenticated
        else Q(requested_by__isnull=True)
    )
    stored = (
        OperationPlan.objects.select_for_update(of=("self",))
        .select_related("pipeline", "operation")
        .filter(mine, plan_id=plan_id)
        .first()
    )
    if stored is None:
        raise UnknownPlan(
            f"no plan {plan_id} of yours: plan_id is what your own dry run answered "
            f"(plans are forgotten a day after they expire)"
        )
    return stored


def plan_changes(
    stored: OperationPlan,
    *,
    request: OperationRequest,
    cluster: ClusterView,
    versions: dict[str, int],
    now: dt.datetime,
) -> list[dict[str, Any]]:
    """Why the stored plan may not start now (empty: it may): used already, expired, a body
    that is not the planned one, a fragment whose mapping or parallel units moved since."""
    changed: list[dict[str, Any]] = []
    if stored.used_at is not None:
        changed.append(
            {
                "what": "used",
                "operation_id": stored.operation.operation_id if stored.operation else None,
                "at": stored.used_at.isoformat(),
            }
        )
    if now >= stored.expires_at:
        changed.append({"what": "expired", "at": stored.expires_at.isoformat()})
    sent = {**request.to_json(), "dry_run": False}
    for name in REQUEST_FIELDS:
        if sent.get(name) != stored.request.get(name):
            changed.append(
                {
                    "what": "body",
                    "field": name,
                    "planned": stored.request.get(name),
                    "sent": sent.get(name),
                }
            )
    for name, planned in sorted(stored.mapping_versions.items()):
        if versions.get(name) != planned:
            changed.append(
                {
                    "what": "mapping_version",
                    "fragment": name,
                    "planned": planned,
                    "now": versions.get(name),
                }
            )
    for name, fragment_plan in sorted(stored.plan["fragments"].items()):
        frag = cluster.fragments.get(name)
        now_units = list(frag.parallel_units) if frag is not None else None
        planned_units = sorted(fragment_plan["parallel_units_before"])
        if now_units != planned_units:
            changed.append(
                {
                    "what": "parallel_units",
                    "fragment": name,
                    "planned": planned_units,
                    "now": now_units,
                }
            )
    return changed


def _sentence(change: dict[str, Any]) -> str:
    what = change["what"]
    if what == "used":
        return f"it already started operation {change['operation_id']}"
    if what == "expired":
        return f"it expired at {change['at']}"
    if what == "body":
        return f"the body's {change['field']} is not the planned one"
    if what == "mapping_version":
        return (
            f"{change['fragment']}'s mapping moved from version {change['planned']} to "
            f"{change['now']}"
        )
    return (
        f"{change['fragment']}'s parallel units changed from {change['planned']} to {change['now']}"
    )


def plan_stale(plan_id: str, changed: list[dict[str, Any]]) -> PlanStale:
    """The refusal of a plan that may not start (its one wording)."""
    return PlanStale(
        f"plan {plan_id} may not start: {'; '.join(_sentence(c) for c in changed)}. "
        f"Plan again (dry_run) and start the new plan_id",
        changed,
    )


def plan_use(stored: OperationPlan, *, operation: Any, now: dt.datetime) -> None:
    """Mark the plan as having started ``operation``: it never starts another."""
    stored.operation = operation
    stored.used_at = now
    stored.save(update_fields=["operation", "used_at"])
