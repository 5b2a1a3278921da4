"""A stateful fragment by name, and one key of it: where it lives, whether a migration is moving
it, and its current state (read from the owner's store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from dashboard.api.errors import ApiError, not_found
from rescaler.cluster.models import Fragment, VnodeMapping
from rescaler.operations.models import RescaleStep
from workers.hashing import vnode_of
from workers.pipeline.model import PipelineError
from workers.readout import ReadoutError, read_key
from workers.rescale.protocol import FINAL, ROUTING_BY_PHASE, Routing, StepPhase
from workers.state import max_user_key_bytes


def fragment_get(*, name: str, pipeline: str | None = None) -> Fragment:
    """A fragment by name (and pipeline, when two pipelines have one of that name)."""
    candidates = Fragment.objects.select_related("pipeline").filter(name=name)
    if pipeline is not None:
        candidates = candidates.filter(pipeline__name=pipeline)
    rows = list(candidates[:2])
    if not rows:
        where = f" in pipeline {pipeline!r}" if pipeline else ""
        known = ", ".join(
            sorted(
                Fragment.objects.filter(kind=Fragment.Kind.STATEFUL).values_list("name", flat=True)
            )
        )
        raise not_found(
            "unknown_fragment",
            f"no fragment {name!r}{where}; stateful fragments: {known or 'none'}",
        )
    if len(rows) > 1:
        raise ApiError(
            "ambiguous_fragment",
            f"several pipelines have a fragment {name!r}; say which with ?pipeline=NAME",
        )
    return rows[0]


def key_state(*, fragment: Fragment, key: str) -> dict[str, Any]:
    """Where a key lives, whether a migration is moving it, and its current state."""
    if fragment.kind != Fragment.Kind.STATEFUL or not fragment.vnodes:
        stateful = fragment.kind == Fragment.Kind.STATEFUL
        why = "it registered no vnode count" if stateful else "it has no keyed state"
        raise not_found(
            "fragment_not_stateful",
            f"fragment {fragment.name!r} is a {fragment.kind} fragment: {why}",
        )
    backend = settings.RESCALER_STATE_BACKEND
    longest = max_user_key_bytes(backend)
    if longest is not None and len(key.encode("utf-8")) > longest:
        raise ApiError(
            "key_too_long",
            f"the key is {len(key.encode('utf-8'))} bytes; a state store key is at most "
            f"{longest} bytes, so no state can exist for it",
        )
    pipeline = fragment.pipeline.name
    # the control plane's view first: what the mapping in Postgres says
    vnode = vnode_of(key, fragment.vnodes)
    mapping = (
        VnodeMapping.objects.filter(fragment=fragment, version=fragment.mapping_version)
        .values_list("mapping", flat=True)
        .first()
    )
    owner = mapping[vnode] if mapping and vnode < len(mapping) else None
    answer: dict[str, Any] = {
        "pipeline": pipeline,
        "fragment": fragment.name,
        "key": key,
        "vnode": vnode,
        "parallel_unit": owner,
        "mapping_version": fragment.mapping_version,
        "exists": False,
        "value": None,
        "as_of_epoch": None,
        "state_error": None,
        "migration": _migration_of(fragment, vnode),
    }
    # then the stores: the runner applies a new mapping before it reports it, so the state
    # directory may be one version ahead of Postgres, and it is where the value is
    try:
        state = read_key(Path(settings.STATE_DIR), pipeline, fragment.name, key, backend=backend)
    except (ReadoutError, PipelineError) as exc:
        answer["state_error"] = str(exc)
        return answer
    answer.update(
        vnode=state.vnode,
        parallel_unit=state.pu,
        mapping_version=state.mapping_version,
        exists=state.exists,
        value=state.value,
        as_of_epoch=state.as_of_epoch,
    )
    return answer


def _migration_of(fragment: Fragment, vnode: int) -> dict[str, Any] | None:
    """The step of an active operation that moves this vnode, if there is one."""
    step = (
        RescaleStep.objects.filter(
            operation__pipeline_id=fragment.pipeline_id,
            fragment=fragment.name,
            vnodes__contains=[vnode],
        )
        .exclude(operation__status__in=FINAL)
        .select_related("operation")
        .order_by("-operation__created_at")
        .first()
    )
    if step is None:
        return None
    return {
        "operation_id": step.operation.operation_id,
        "step": step.step,
        "source_pu": step.source_pu,
        "target_pu": step.target_pu,
        "phase": step.phase,
        "routing": ROUTING_BY_PHASE.get(StepPhase(step.phase), Routing.SOURCE),
    }
