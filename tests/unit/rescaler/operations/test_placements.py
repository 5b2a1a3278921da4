"""The placement at any time (``rescaler.operations.placements``): which kept version was in
effect at an instant, a version's record (its time, its end, its neighbours, the operation that
made it), before the first version, unknown versions, and an operation's before and after."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Fragment, VnodeMapping
from rescaler.operations.models import RescaleOperation
from rescaler.operations.placements import (
    KeptVersion,
    PlacementFragmentUnknown,
    UnknownMappingVersion,
    operation_versions,
    placement_as_of,
    placement_at_version,
    version_in_effect,
)
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, PlacementHistory, placement_history

pytestmark = pytest.mark.django_db

T = dt.datetime(2026, 11, 21, 14, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)


def test_the_version_in_effect_is_the_newest_recorded_by_then() -> None:
    kept = [KeptVersion(1, T), KeptVersion(2, T + 10 * MINUTE), KeptVersion(4, T + 20 * MINUTE)]
    assert version_in_effect(kept, T - MINUTE) is None, "before the first"
    assert version_in_effect(kept, T) == 1, "a version is in effect from its own moment"
    assert version_in_effect(kept, T + 9 * MINUTE) == 1
    assert version_in_effect(kept, T + 10 * MINUTE) == 2
    assert version_in_effect(kept, T + 15 * MINUTE) == 2, "between two versions: the older"
    assert version_in_effect(kept, T + 99 * MINUTE) == 4, "a kept number may skip one"
    assert version_in_effect([], T) is None


def test_two_clocks_that_disagreed_never_bring_an_older_version_back() -> None:
    kept = [KeptVersion(1, T), KeptVersion(2, T + 10 * MINUTE), KeptVersion(3, T + 5 * MINUTE)]
    assert version_in_effect(kept, T + 6 * MINUTE) == 3
    assert version_in_effect(kept, T + 11 * MINUTE) == 3


@pytest.fixture
def history(monkeypatch: pytest.MonkeyPatch) -> PlacementHistory:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    return placement_history()


def test_a_version_s_record_says_when_until_which_operation_and_its_neighbours(
    history: PlacementHistory,
) -> None:
    (row,) = placement_at_version(fragment=FRAGMENT, version=2).fragments
    version = row.version
    assert version is not None
    assert version.version == 2 and version.mapping == tuple(history.mappings[2])
    assert version.effective_at == history.recorded[2]
    assert version.superseded_at == history.recorded[3]
    assert (version.previous_version, version.next_version) == (1, 3)
    assert version.operation_id == history.operation_id
    assert version.parallel_units == (0, 1, 2)
    assert version.vnodes_of()[2] == (0, 1, 2, 3)
    assert row.first_effective_at == history.recorded[1] and row.versions_kept == 4


def test_the_first_and_the_newest_versions_were_made_by_no_operation(
    history: PlacementHistory,
) -> None:
    (first,) = placement_at_version(fragment=FRAGMENT, version=1).fragments
    assert first.version is not None and first.version.operation_id is None
    assert first.version.previous_version is None and first.version.next_version == 2
    (last,) = placement_at_version(fragment=FRAGMENT, version=5).fragments
    assert last.version is not None and last.version.operation_id is None
    assert last.version.previous_version == 3, "4 was never kept: the kept neighbour"
    assert last.version.next_version is None and last.version.current


@pytest.mark.parametrize(
    ("minutes", "version"),
    [(0, 1), (12, 1), (15, 2), (17, 2), (25, 3), (89, 3), (90, 5), (500, 5)],
)
def test_an_instant_between_versions_is_the_older_one_s(
    history: PlacementHistory, minutes: int, version: int
) -> None:
    at = history.recorded[1] + minutes * MINUTE
    placement = placement_as_of(at=at)
    (row,) = placement.fragments
    assert row.version is not None and row.version.version == version
    assert row.version.mapping == tuple(history.mappings[version])
    assert placement.fragment is None and placement.version is None
    assert not placement.before_first_version


def test_an_instant_after_now_is_now(history: PlacementHistory) -> None:
    placement = placement_as_of(at=timezone.now() + dt.timedelta(days=365))
    assert placement.as_of <= timezone.now()
    assert placement.fragments[0].version is not None
    assert placement.fragments[0].version.version == 5


def test_before_the_first_version_there_is_no_placement_and_it_says_since_when(
    history: PlacementHistory,
) -> None:
    placement = placement_as_of(at=history.recorded[1] - MINUTE)
    (row,) = placement.fragments
    assert row.version is None and placement.before_first_version
    assert placement.first_effective_at == history.recorded[1]


def test_a_version_asked_dates_the_view(history: PlacementHistory) -> None:
    placement = placement_at_version(fragment=FRAGMENT, version=3, pipeline=PIPELINE)
    assert placement.as_of == history.recorded[3]
    assert (placement.fragment, placement.version) == (FRAGMENT, 3)


def test_an_unknown_version_or_fragment_is_refused_with_what_is_kept(
    history: PlacementHistory,
) -> None:
    with pytest.raises(UnknownMappingVersion) as refused:
        placement_at_version(fragment=FRAGMENT, version=4)
    assert refused.value.code == "unknown_version"
    assert "kept: 1–3, 5" in str(refused.value)
    assert refused.value.details() == {"field": "version"}
    with pytest.raises(PlacementFragmentUnknown) as unknown:
        placement_at_version(fragment="nope", version=1)
    assert unknown.value.code == "unknown_fragment" and FRAGMENT in str(unknown.value)
    with pytest.raises(PlacementFragmentUnknown):
        placement_at_version(fragment="source", version=1)  # no keyed state, no mapping


def test_an_operation_left_between_the_version_it_found_and_the_last_it_made(
    history: PlacementHistory,
) -> None:
    op = RescaleOperation.objects.get(operation_id=history.operation_id)
    (versions,) = operation_versions(op)
    assert (versions.fragment, versions.before, versions.after) == (FRAGMENT, 1, 3)


def test_an_open_operation_made_what_was_recorded_since_it_was_requested(
    history: PlacementHistory,
) -> None:
    op = RescaleOperation.objects.get(operation_id=history.operation_id)
    RescaleOperation.objects.filter(pk=op.pk).update(finished_at=None, status="running")
    op.refresh_from_db()
    (versions,) = operation_versions(op)
    assert (versions.before, versions.after) == (1, 5)
    (row,) = placement_at_version(fragment=FRAGMENT, version=5).fragments
    assert row.version is not None and row.version.operation_id == op.operation_id


def test_an_operation_that_moved_nothing_made_no_version(
    history: PlacementHistory,
) -> None:
    op = RescaleOperation.objects.get(operation_id=history.operation_id)
    later = history.recorded[5] + MINUTE
    RescaleOperation.objects.filter(pk=op.pk).update(created_at=later, finished_at=later)
    op.refresh_from_db()
    (versions,) = operation_versions(op)
    assert (versions.before, versions.after) == (5, None)


def test_only_the_chosen_mapping_is_read(history: PlacementHistory) -> None:
    """Many versions, each a whole mapping: the view reads the one it shows, never every one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fragment = Fragment.objects.get(name=FRAGMENT)
    for version in range(6, 40):
        cluster_services.mapping_record(
            fragment=fragment, version=version, mapping=history.mappings[5]
        )
    assert VnodeMapping.objects.filter(fragment=fragment).count() == 38
    with CaptureQueriesContext(connection) as queries:
        placement_as_of(at=timezone.now())
    assert len(queries) <= 4, [q["sql"] for q in queries]
