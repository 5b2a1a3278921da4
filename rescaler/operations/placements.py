"""The placement at any time: each stateful fragment's vnode → PU mapping as of one of its
mapping versions or as of an instant, built from the versions the control plane keeps.

What is kept (``rescaler.cluster.models.VnodeMapping``): one row per (fragment, version) the
runner registered, with the mapping (vnode → PU) and ``created_at``, the moment the control
plane recorded it. The runner registers its topology at every start and after every barrier
whose plan changed a placement (``workers.barrier``), before the epoch that uses it runs and
before any operation reports its end, so ``created_at`` is when the version took effect, to
within one barrier. A live operation moves a fragment's mapping on by one version per barrier
at most, so its versions are kept one by one; a version the control plane never saw (a
registration lost while the database was away, a state directory restored from elsewhere) is
not kept, and the kept numbers then skip it: "previous" and "next" are the kept neighbours.

What is not kept: the PU set of a past version (``Fragment.parallel_units`` is today's; a past
version's PUs here are those its mapping gives a vnode, so a PU added but not yet given one is
not among them), nor the keys, bytes and records per PU of the past (``Fragment.vnode_load``
is the last report only). Which operation made a version is read from the operations
themselves: the operation on the fragment that was open (from its request to its end) when the
version was recorded; one operation at most holds a fragment at a time
(``OperationFragment``), and a version recorded outside every operation (the first one, a
restart's) was made by none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from rescaler.cluster.models import Fragment, VnodeMapping
from rescaler.operations.errors import OperationError
from rescaler.operations.models import RescaleOperation


class PlacementError(OperationError):
    """A past placement that cannot be shown as asked; ``field`` is the query parameter."""

    field = ""

    def details(self) -> dict[str, str]:
        return {"field": self.field} if self.field else {}


class UnknownMappingVersion(PlacementError):
    code = "unknown_version"
    field = "version"


class PlacementFragmentUnknown(PlacementError):
    code = "unknown_fragment"
    field = "fragment"


class PlacementFragmentAmbiguous(PlacementError):
    code = "ambiguous_fragment"
    field = "fragment"


@dataclass(frozen=True)
class KeptVersion:
    """One kept version of a fragment's mapping, without the mapping: what deciding needs."""

    version: int
    effective_at: dt.datetime


def version_in_effect(kept: Sequence[KeptVersion], at: dt.datetime) -> int | None:
    """The one rule of which version was in effect at ``at``: of the versions kept (in version
    order), the newest that had taken effect by then; None before the first. A version takes
    effect at the moment it was recorded, and stays until the next kept one does."""
    # the newest recorded by then, whatever the order of the times: should two clocks have
    # disagreed, an older version recorded after a newer one is never taken for it
    started = [k.version for k in kept if k.effective_at <= at]
    return max(started) if started else None


@dataclass(frozen=True)
class MappingVersion:
    """One version of a fragment's mapping, as kept: when it took effect, until when, which
    operation made it (None: none did), and its kept neighbours."""

    version: int
    effective_at: dt.datetime
    superseded_at: dt.datetime | None  # when the next kept version took effect; None: in effect
    previous_version: int | None
    next_version: int | None
    operation_id: str | None
    mapping: tuple[int, ...]  # mapping[vnode] = PU

    @property
    def parallel_units(self) -> tuple[int, ...]:
        """The PUs its mapping gives a vnode (the PU set of a past version is not kept)."""
        return tuple(sorted(set(self.mapping)))

    def vnodes_of(self) -> dict[int, tuple[int, ...]]:
        """PU → the vnodes the mapping gives it, in vnode order."""
        owned: dict[int, list[int]] = {}
        for vnode, pu in enumerate(self.mapping):
            owned.setdefault(pu, []).append(vnode)
        return {pu: tuple(vnodes) for pu, vnodes in sorted(owned.items())}

    @property
    def current(self) -> bool:
        return self.superseded_at is None


@dataclass(frozen=True)
class FragmentPlacement:
    """One stateful fragment as of the instant asked: the version then in effect (None before
    its first kept version, which ``first_effective_at`` dates)."""

    fragment: str
    pipeline: str
    vnodes: int | None
    version: MappingVersion | None
    first_effective_at: dt.datetime | None
    first_version: int | None  # its first kept version's number
    versions_kept: int


@dataclass(frozen=True)
class Placement:
    """Every stateful fragment's placement as of ``as_of``: the instant asked, or when the
    version asked took effect (``fragment`` and ``version`` then say which)."""

    as_of: dt.datetime
    fragment: str | None
    version: int | None
    fragments: tuple[FragmentPlacement, ...]

    @property
    def before_first_version(self) -> bool:
        """No fragment had a kept version yet at ``as_of``."""
        return all(f.version is None for f in self.fragments)

    @property
    def first_effective_at(self) -> dt.datetime | None:
        firsts = [f.first_effective_at for f in self.fragments if f.first_effective_at]
        return min(firsts) if firsts else None


@dataclass(frozen=True)
class OperationVersions:
    """The placements an operation left between, for one of its fragments: the version in
    effect when it was requested, and the last version it made (None: it made none, yet)."""

    fragment: str
    pipeline: str
    before: int | None
    after: int | None


def _fragments(pipeline: str | None) -> list[Fragment]:
    rows = Fragment.objects.filter(kind=Fragment.Kind.STATEFUL).select_related("pipeline")
    if pipeline is None:
        rows = rows.filter(pipeline__archived_at__isnull=True)
    else:
        rows = rows.filter(pipeline__name=pipeline)
    return list(rows.order_by("pipeline__name", "position"))


def _kept(fragments: list[Fragment]) -> dict[int, list[KeptVersion]]:
    """Per fragment, its kept versions in version order (no mapping read: one query)."""
    kept: dict[int, list[KeptVersion]] = {f.pk: [] for f in fragments}
    rows = (
        VnodeMapping.objects.filter(fragment__in=fragments)
        .order_by("fragment_id", "version")
        .values_list("fragment_id", "version", "created_at")
    )
    for fragment_id, version, created_at in rows:
        kept[fragment_id].append(KeptVersion(version, created_at))
    return kept


def _made_by(fragment: Fragment, at: dt.datetime) -> str | None:
    """The operation on ``fragment`` open (requested, not yet ended) at ``at``: the one that
    made a version recorded then."""
    row = (
        RescaleOperation.objects.filter(
            pipeline_id=fragment.pipeline_id, fragments__contains=[fragment.name], created_at__lt=at
        )
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=at))
        .order_by("-created_at")
        .values_list("operation_id", flat=True)
        .first()
    )
    return row


def _version_record(fragment: Fragment, kept: list[KeptVersion], version: int) -> MappingVersion:
    numbers = [k.version for k in kept]
    index = numbers.index(version)
    mapping = (
        VnodeMapping.objects.filter(fragment=fragment, version=version)
        .values_list("mapping", flat=True)
        .get()
    )
    after = kept[index + 1] if index + 1 < len(kept) else None
    return MappingVersion(
        version=version,
        effective_at=kept[index].effective_at,
        superseded_at=None if after is None else after.effective_at,
        previous_version=numbers[index - 1] if index > 0 else None,
        next_version=None if after is None else after.version,
        operation_id=_made_by(fragment, kept[index].effective_at),
        mapping=tuple(int(pu) for pu in mapping or ()),
    )


def _placement(
    fragments: list[Fragment],
    at: dt.datetime,
    *,
    asked: tuple[Fragment, int] | None = None,
) -> Placement:
    kept = _kept(fragments)
    rows = []
    for fragment in fragments:
        versions = kept[fragment.pk]
        if asked is not None and asked[0].pk == fragment.pk:
            number: int | None = asked[1]
        else:
            number = version_in_effect(versions, at)
        rows.append(
            FragmentPlacement(
                fragment=fragment.name,
                pipeline=fragment.pipeline.name,
                vnodes=fragment.vnodes,
                version=None if number is None else _version_record(fragment, versions, number),
                first_effective_at=versions[0].effective_at if versions else None,
                first_version=versions[0].version if versions else None,
                versions_kept=len(versions),
            )
        )
    return Placement(
        as_of=at,
        fragment=None if asked is None else asked[0].name,
        version=None if asked is None else asked[1],
        fragments=tuple(rows),
    )


def placement_as_of(*, at: dt.datetime, pipeline: str | None = None) -> Placement:
    """Every stateful fragment's placement (of ``pipeline``; None: of every pipeline not
    archived) as of the instant ``at``. An instant after now is now."""
    return _placement(_fragments(pipeline), min(at, timezone.now()))


def placement_at_version(*, fragment: str, version: int, pipeline: str | None = None) -> Placement:
    """``fragment`` at its kept ``version``, the other fragments of the view as of the moment
    that version took effect. Refused: an unknown fragment (or one two pipelines have, without
    ``pipeline``) and a version not kept."""
    fragments = _fragments(pipeline)
    named = [f for f in fragments if f.name == fragment]
    if not named:
        known = ", ".join(sorted({f.name for f in fragments})) or "none"
        where = f" in pipeline {pipeline!r}" if pipeline else ""
        raise PlacementFragmentUnknown(
            f"no stateful fragment {fragment!r}{where}; stateful fragments: {known}"
        )
    if len(named) > 1:
        raise PlacementFragmentAmbiguous(
            f"several pipelines have a fragment {fragment!r}; say which with pipeline=NAME"
        )
    chosen = named[0]
    kept = _kept([chosen])[chosen.pk]
    match = next((k for k in kept if k.version == version), None)
    if match is None:
        raise UnknownMappingVersion(
            f"{chosen.name} has no kept mapping version {version}; kept: {_numbers(kept)}"
        )
    others = [f for f in fragments if f.pipeline_id == chosen.pipeline_id]
    return _placement(others, match.effective_at, asked=(chosen, version))


def _numbers(kept: list[KeptVersion]) -> str:
    """The kept version numbers as runs ("1–4, 6"); "none" without any."""
    if not kept:
        return "none"
    runs: list[list[int]] = []
    for k in kept:
        if runs and k.version == runs[-1][-1] + 1:
            runs[-1].append(k.version)
        else:
            runs.append([k.version])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def operation_versions(op: RescaleOperation) -> list[OperationVersions]:
    """For each fragment of ``op``: the version in effect when it was requested (what it
    started from) and the newest version recorded while it was open (what it made)."""
    fragments = list(
        Fragment.objects.filter(pipeline_id=op.pipeline_id, name__in=list(op.fragments))
        .select_related("pipeline")
        .order_by("position")
    )
    kept = _kept(fragments)
    end = op.finished_at
    answers = []
    for fragment in fragments:
        versions = kept[fragment.pk]
        before = version_in_effect(versions, op.created_at)
        made = [
            k.version
            for k in versions
            if k.effective_at > op.created_at and (end is None or k.effective_at <= end)
        ]
        answers.append(
            OperationVersions(
                fragment=fragment.name,
                pipeline=fragment.pipeline.name,
                before=before,
                after=max(made) if made else None,
            )
        )
    return answers
