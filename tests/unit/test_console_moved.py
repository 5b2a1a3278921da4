"""Moved against planned: keys that arrive in a vnode while it moves are said to have arrived,
never counted as more than 100 % of the plan (the API's ``moved``, the operation page)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import F
from django.test import Client

from dashboard.format import count, moved_text, size
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import Moved, operation_moved
from tests.unit.api.fixtures import make_user, register_cluster, request_body, token_client


def test_counts_and_sizes_print_as_the_pages_scripts_print_them() -> None:
    assert count(34033) == "34,033" and count(0) == "0" and count(None) == "–"
    assert size(512) == "512 B" and size(2_831_155) == "2.7 MB" and size(None) == "–"
    assert size(1024) == "1.0 KB" and size(5 * 1024**5) == "5120.0 TB"


@pytest.mark.parametrize(
    ("measure", "moved", "text"),
    [
        ("keys", Moved(34033, 0), "0 of 34,033 (0 %)"),
        ("keys", Moved(34033, 17000), "17,000 of 34,033 (49 %)"),  # 49.95 %: rounded down
        ("keys", Moved(34033, 34033), "34,033 of 34,033 (100 %)"),
        (
            "keys",
            Moved(34033, 34467, 434),
            "34,467 moved: 34,033 of 34,033 planned at the start (100 %); "
            "434 arrived during the move",
        ),
        (
            "keys",
            Moved(34033, 10200, 200),
            "10,200 moved: 10,000 of 34,033 planned at the start (29 %); "
            "200 arrived during the move",
        ),
        (
            "bytes",
            Moved(2_831_155, 2_936_012, 104_857),
            "2.8 MB moved: 2.7 MB of 2.7 MB planned at the start (100 %); "
            "102.4 KB arrived during the move",
        ),
        ("vnodes", Moved(0, 0), "0 of 0"),
    ],
)
def test_moved_is_said_against_planned_never_over_100_percent(
    measure: str, moved: Moved, text: str
) -> None:
    assert moved_text(measure, moved) == text
    assert moved.share is None or moved.share <= 1


@pytest.fixture
def finished_with_arrivals(db: None, monkeypatch: pytest.MonkeyPatch) -> RescaleOperation:
    """A 2 -> 4 scale-out of 16 vnodes (8 move, 10 keys each) whose every step moved 5 keys and
    50 bytes more than planned: keys written to its vnodes while they moved."""

    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    register_cluster(vnodes=16, initial_pus=(0, 1))
    op = operation_request(
        user=make_user("operator", rescale=True), body=request_body(added_parallel_units=[2, 3])
    )
    assert isinstance(op, RescaleOperation)
    RescaleStep.objects.filter(operation=op).update(
        phase="done", keys_moved=F("keys") + 5, bytes_moved=F("bytes") + 50
    )
    steps = RescaleStep.objects.filter(operation=op)
    RescaleOperation.objects.filter(pk=op.pk).update(
        status="completed",
        vnodes_moved=8,
        keys_moved=sum(s.keys_moved for s in steps),
        bytes_moved=sum(s.bytes_moved for s in steps),
    )
    return RescaleOperation.objects.get(pk=op.pk)


def test_arrivals_are_the_steps_surplus(finished_with_arrivals: RescaleOperation) -> None:
    moved = operation_moved(finished_with_arrivals)
    steps = finished_with_arrivals.steps.count()
    assert moved["keys"] == Moved(planned=80, moved=80 + 5 * steps, arrived=5 * steps)
    assert moved["keys"].share == 1.0 and moved["keys"].of_plan == 80
    assert moved["bytes"].arrived == 50 * steps and moved["bytes"].share == 1.0
    assert moved["vnodes"] == Moved(planned=8, moved=8, arrived=0)


def test_a_step_that_lost_keys_does_not_hide_another_ones_arrivals(
    finished_with_arrivals: RescaleOperation,
) -> None:
    first, *rest = finished_with_arrivals.steps.order_by("step")
    RescaleStep.objects.filter(pk=first.pk).update(keys_moved=first.keys - 5)
    op = RescaleOperation.objects.get(pk=finished_with_arrivals.pk)
    op.keys_moved -= 10
    moved = operation_moved(op)
    assert moved["keys"].arrived == 5 * len(rest)
    assert moved["keys"].of_plan == 80 - 5 and moved["keys"].share == pytest.approx(75 / 80)


def test_the_api_and_the_page_say_it_the_same_way(
    finished_with_arrivals: RescaleOperation, client: Client
) -> None:
    op = finished_with_arrivals
    user: Any = op.requested_by
    text = "100 moved: 80 of 80 planned at the start (100 %); 20 arrived during the move"
    data = token_client(user).get(f"/api/v1/operations/{op.operation_id}").json()
    assert data["moved"]["keys"] == {
        "planned": 80, "moved": 100, "arrived": 20, "share": 1.0, "text": text,
    }  # fmt: skip
    assert data["moved"]["vnodes"]["text"] == "8 of 8 (100 %)"
    client.force_login(user)
    page = client.get(f"/operations/{op.operation_id}/").content.decode()
    assert f'<div id="keys-text" class="mid">{text}</div>' in page, "rendered without JavaScript"
    assert '<progress id="keys-bar" max="1" value="1.0000">' in page
