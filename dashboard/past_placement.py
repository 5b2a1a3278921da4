"""The cluster page's matrix as of a past instant (``?as_of=<ISO time>``) or a fragment's past
mapping version (``?fragment=<name>&version=<n>``, ``&pipeline=`` when two pipelines have the
fragment): the question read from the query string, the placement asked of
``rescaler.operations.placements`` (the same selector as ``GET cluster?as_of=``), and what the
banner says of it. The view only passes these along."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from dashboard.matrix import (
    METRICS,
    Matrix,
    MatrixCell,
    MatrixRow,
    PuColumn,
    pu_columns,
    skew,
)
from rescaler.operations.placements import (
    FragmentPlacement,
    Placement,
    PlacementError,
    placement_as_of,
    placement_at_version,
)

PAST_KEYS = ("as_of", "fragment", "version", "pipeline")


@dataclass(frozen=True)
class PastRow:
    """One fragment's line of the banner: its version then, when it took effect and until
    when, the operation that made it, and the kept versions on either side (to step to)."""

    fragment: str
    pipeline: str
    version: int | None
    effective_at: dt.datetime | None
    superseded_at: dt.datetime | None
    operation_id: str | None
    previous_version: int | None
    next_version: int | None
    first_effective_at: dt.datetime | None
    asked: bool  # the fragment whose version the query string names

    @classmethod
    def of(cls, row: FragmentPlacement, asked: bool) -> PastRow:
        v = row.version
        return cls(
            fragment=row.fragment,
            pipeline=row.pipeline,
            version=None if v is None else v.version,
            effective_at=None if v is None else v.effective_at,
            superseded_at=None if v is None else v.superseded_at,
            operation_id=None if v is None else v.operation_id,
            previous_version=None if v is None else v.previous_version,
            # before its first version, the next one to step to is its first
            next_version=row.first_version if v is None else v.next_version,
            first_effective_at=row.first_effective_at,
            asked=asked,
        )


@dataclass(frozen=True)
class PastView:
    """What the query string asks of the past: the placement, or why it cannot be shown
    (``error``, with the page's status 400)."""

    placement: Placement | None
    rows: tuple[PastRow, ...]
    error: str = ""
    as_of_text: str = ""  # what the as_of field of the form holds
    live_query: str = ""  # the page's query string without the past (and a cell): back to live


def _as_of(text: str) -> dt.datetime | None:
    try:
        moment = parse_datetime(text.strip())
    except ValueError:  # well formed but no such time (a 13th month)
        return None
    if moment is not None and timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


def past_view(query: QueryDict) -> PastView | None:
    """None: the query string asks for the live placement."""
    view = _past_view(query)
    if view is None:
        return None
    live = query.copy()
    for key in (*PAST_KEYS, "cell"):
        live.pop(key, None)
    return replace(view, live_query=live.urlencode())


def _past_view(query: QueryDict) -> PastView | None:
    as_of, fragment, version = query.get("as_of"), query.get("fragment"), query.get("version")
    pipeline = query.get("pipeline") or None
    if not as_of and not fragment and not version:
        return None
    if as_of:
        moment = _as_of(as_of)
        if moment is None:
            return PastView(
                None,
                (),
                error=f"{as_of!r} is not a time: give one as ISO 8601, e.g. 2026-11-21T14:05:00Z",
                as_of_text=as_of,
            )
        try:
            placement = placement_as_of(at=moment, pipeline=pipeline)
        except PlacementError as exc:
            return PastView(None, (), error=str(exc), as_of_text=as_of)
        return _view(placement, as_of_text=as_of)
    if not fragment or not version or not version.isdigit():
        return PastView(
            None,
            (),
            error="a past version needs the fragment and the version, a whole number: "
            "?fragment=<name>&version=<n>",
        )
    try:
        placement = placement_at_version(fragment=fragment, version=int(version), pipeline=pipeline)
    except PlacementError as exc:
        return PastView(None, (), error=str(exc))
    return _view(placement, as_of_text="")


def _view(placement: Placement, *, as_of_text: str) -> PastView:
    rows = tuple(
        PastRow.of(row, asked=row.fragment == placement.fragment) for row in placement.fragments
    )
    return PastView(placement, rows, as_of_text=as_of_text)


def placement_matrix(cluster: dict[str, Any], placement: Placement) -> Matrix:
    """The matrix of a past placement: each stateful fragment's cells as the mapping version
    then in effect gave it vnodes (rows: ``placement.fragments``; the fragment's key and
    operator from ``cluster_info()``'s answer). Only vnodes: the keys, bytes and records of
    the past are not kept. Its columns are today's PUs, and a PU since removed that the past
    mapping gave vnodes; a fragment before its first kept version has no cell."""
    past_pus = {
        pu for f in placement.fragments if f.version is not None for pu in f.version.mapping
    }
    columns = list(pu_columns(cluster, past_pus))
    known = {c.pu for c in columns}
    # a PU whose row went with its worker's pipeline: a column all the same, of no worker now
    columns += [PuColumn(pu=pu, worker="", alive=False) for pu in sorted(past_pus - known)]
    columns.sort(key=lambda c: c.pu)
    index = {c.pu: i for i, c in enumerate(columns)}
    described = {(f["pipeline"], f["name"]): f for f in cluster["fragments"]}
    rows = []
    for frag in placement.fragments:
        now = described.get((frag.pipeline, frag.fragment), {})
        cells: list[MatrixCell | None] = [None] * len(columns)
        counts: list[int] = []
        if frag.version is not None:
            owned = frag.version.vnodes_of()
            top = max((len(v) for v in owned.values()), default=0)
            for pu, vnodes in owned.items():
                counts.append(len(vnodes))
                heat = {m: 0.0 for m, _ in METRICS} | {"vnodes": len(vnodes) / top if top else 0.0}
                cells[index[pu]] = MatrixCell(
                    pu=pu, vnodes=len(vnodes), keys=0, bytes=0, rows=0,
                    vnode_list=vnodes, heat=heat,
                )  # fmt: skip
        rows.append(
            MatrixRow(
                fragment=frag.fragment,
                pipeline=frag.pipeline,
                vnodes=int(frag.vnodes or 0),
                mapping_version=None if frag.version is None else frag.version.version,
                key=now.get("key") or "",
                operator=now.get("operator") or "",
                busy_with=None,
                cells=tuple(cells),
                skew={m: skew(counts) if m == "vnodes" else None for m, _ in METRICS},
            )
        )
    return Matrix(columns=tuple(columns), rows=tuple(rows), epoch=None, past=True)
