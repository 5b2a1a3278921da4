"""``GET cluster`` as of a past instant or mapping version: the placement of
``rescaler.operations.placements`` as the API's document (``ClusterPlacementSerializer``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone

from dashboard.api.errors import not_found
from rescaler.cluster.models import Pipeline
from rescaler.operations.placements import (
    FragmentPlacement,
    Placement,
    placement_as_of,
    placement_at_version,
)


def past_placement(
    *,
    as_of: dt.datetime | None = None,
    fragment: str | None = None,
    version: int | None = None,
    pipeline: str | None = None,
) -> Placement:
    """The placement asked: ``fragment`` at ``version``, else as of ``as_of`` (a time without
    an offset is in the server's time zone). 404 ``unknown_pipeline`` for a pipeline no
    runner registered."""
    if pipeline is not None and not Pipeline.objects.filter(name=pipeline).exists():
        raise not_found("unknown_pipeline", f"no pipeline named {pipeline!r} has registered")
    if fragment is not None and version is not None:
        return placement_at_version(fragment=fragment, version=version, pipeline=pipeline)
    assert as_of is not None
    if timezone.is_naive(as_of):
        as_of = timezone.make_aware(as_of)
    return placement_as_of(at=as_of, pipeline=pipeline)


def placement_detail(placement: Placement) -> str:
    """What the document shows, in one sentence."""
    first = placement.first_effective_at
    if not placement.fragments:
        return "no stateful fragment has registered: there is no placement to show"
    if placement.before_first_version:
        since = "none is kept" if first is None else f"the first took effect at {first.isoformat()}"
        return f"no mapping version had taken effect by {placement.as_of.isoformat()}: {since}"
    if placement.version is not None:
        return (
            f"{placement.fragment} at mapping version {placement.version}, the other fragments "
            f"as of {placement.as_of.isoformat()}, when it took effect"
        )
    return f"each stateful fragment's mapping version in effect at {placement.as_of.isoformat()}"


def _fragment(row: FragmentPlacement) -> dict[str, Any]:
    v = row.version
    return {
        "name": row.fragment,
        "pipeline": row.pipeline,
        "vnodes": row.vnodes,
        "mapping_version": None if v is None else v.version,
        "mapping": None if v is None else list(v.mapping),
        "parallel_units": [] if v is None else list(v.parallel_units),
        "effective_at": None if v is None else v.effective_at,
        "superseded_at": None if v is None else v.superseded_at,
        "operation_id": None if v is None else v.operation_id,
        "previous_version": None if v is None else v.previous_version,
        "next_version": None if v is None else v.next_version,
        "first_version_at": row.first_effective_at,
        "per_parallel_unit": []
        if v is None
        else [{"parallel_unit": pu, "vnodes": len(vnodes)} for pu, vnodes in v.vnodes_of().items()],
    }


def placement_document(placement: Placement) -> dict[str, Any]:
    return {
        "as_of": placement.as_of,
        "fragment": placement.fragment,
        "version": placement.version,
        "before_first_version": placement.before_first_version,
        "first_version_at": placement.first_effective_at,
        "detail": placement_detail(placement),
        "fragments": [_fragment(row) for row in placement.fragments],
    }
