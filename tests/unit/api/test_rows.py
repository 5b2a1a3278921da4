"""``dashboard.api.rows.RowSerializer``: the rows of a large operation (steps, vnodes, audit
events) serialized in one loop answer exactly what DRF's field-by-field pass answers, whatever
the values (nulls, empty and odd JSON, enum members, times)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from rest_framework import serializers

from dashboard.api.rows import RowSerializer
from dashboard.api.selectors.operations import operation_vnodes
from dashboard.api.serializers.operations import (
    AuditEventSerializer,
    OperationVnodeSerializer,
    StepSerializer,
)
from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record_many
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import FRAGMENT, make_user, register_cluster
from workers.rescale.protocol import Routing, StepPhase

pytestmark = pytest.mark.django_db


def drf(serializer: serializers.Serializer, instance: Any) -> dict[str, Any]:
    """DRF's own field-by-field pass."""
    return serializers.Serializer.to_representation(serializer, instance)


def same(serializer: serializers.Serializer, instances: list[Any]) -> None:
    fast = [serializer.to_representation(i) for i in instances]
    slow = [drf(serializer, i) for i in instances]
    assert fast == slow
    # and the same JSON, types included (an int is not a float, a str not an enum's repr)
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    assert [list(row) for row in fast] == [list(row) for row in slow]  # the fields' order


@pytest.fixture
def op(monkeypatch: pytest.MonkeyPatch) -> RescaleOperation:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
    register_cluster()
    operation = operation_request(
        user=make_user("operator", rescale=True),
        body={
            "changes": {FRAGMENT: {"added_parallel_units": [2, 3]}},
            "granularity": {"vnodes_per_step": 2},
        },
    )
    assert isinstance(operation, RescaleOperation)
    return operation


def test_steps_as_planned_and_as_reported(op: RescaleOperation) -> None:
    steps = list(op.steps.order_by("step"))
    first, second, third = steps[:3]
    first.phase = StepPhase.ACQUIRING  # an enum member, as the runner's code sets it
    first.timings = {StepPhase.PENDING: 1_700_000_000, "collecting": 1.5, "odd": None}
    first.keys_moved, first.bytes_moved, first.collect_epoch = 10, 2**40, 7
    first.per_vnode = {"3": {"keys": 1, "bytes": 2, "hold_queue": 0}}
    second.timings = {}
    second.error = 'disk full: "/var/state" \\ 漢'
    third.timings = None
    third.updated_at = dt.datetime(2026, 11, 27, 8, 30, 0, 123456, tzinfo=dt.UTC)
    same(StepSerializer(), steps)
    assert StepSerializer()._plan is not None  # the fast pass, not the fallback


def test_vnode_rows(op: RescaleOperation) -> None:
    rows = operation_vnodes(operation=op)
    rows[0] = {**rows[0], "keys": 12, "bytes": None, "routing": Routing.HOLD_QUEUE}
    rows[1] = {**rows[1], "routing": "target"}
    same(OperationVnodeSerializer(), rows)


def test_audit_events_with_any_json(op: RescaleOperation) -> None:
    events = audit_record_many(
        [
            {
                "actor_name": "runner",
                "action": "step.done",
                "obj": ("step", f"x/{n}"),
                "before": before,
                "after": after,
            }
            for n, (before, after) in enumerate(
                [(None, None), ({}, []), ({"phase": "pending"}, {"a": [1, 2.5, None]}), (3, "s")]
            )
        ]
    )
    read = list(AuditEvent.objects.filter(pk__in=[e.pk for e in events]).order_by("id"))
    same(AuditEventSerializer(), events + read)


def test_a_serializer_with_a_field_that_is_not_flat_gets_drf_s_pass() -> None:
    class WithMethod(RowSerializer):
        n = serializers.IntegerField()
        twice = serializers.SerializerMethodField()

        def get_twice(self, row: dict[str, Any]) -> int:
            return 2 * row["n"]

    serializer = WithMethod()
    assert serializer.to_representation({"n": 2}) == {"n": 2, "twice": 4}
    assert serializer._plan is None


def test_a_row_without_a_field_gets_drf_s_answer() -> None:
    class Optional(RowSerializer):
        n = serializers.IntegerField()
        m = serializers.IntegerField(required=False)
        d = serializers.IntegerField(default=5)

    assert Optional().to_representation({"n": 1}) == drf(Optional(), {"n": 1}) == {"n": 1, "d": 5}


def test_a_step_row_from_the_database_is_unchanged_by_the_fast_pass(op: RescaleOperation) -> None:
    step = RescaleStep.objects.filter(operation=op).first()
    assert step is not None
    assert StepSerializer(step).data == drf(StepSerializer(), step)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_times_in_a_list_are_drf_s_in_the_current_time_zone(
    op: RescaleOperation, zone: str
) -> None:
    """A list reads the time zone once (``RowListSerializer``): the same text as DRF's pass in
    any zone, aware or naive."""
    from django.utils import timezone

    steps = list(op.steps.order_by("step"))
    steps[0].updated_at = dt.datetime(2026, 11, 27, 8, 30, 0, 123456, tzinfo=dt.UTC)
    steps[1].updated_at = dt.datetime(2026, 6, 1, 23, 59, 59)  # naive: DRF makes it aware
    with timezone.override(zone):
        fast = StepSerializer(steps, many=True).data
        slow = [drf(StepSerializer(), s) for s in steps]
    assert [r["updated_at"] for r in fast] == [r["updated_at"] for r in slow]
    assert list(fast) == slow
    assert isinstance(StepSerializer(many=True), serializers.ListSerializer)
    assert StepSerializer(many=True).__class__.__name__ == "RowListSerializer"
