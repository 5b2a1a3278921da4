"""``rescaler.bulk``: many rows in one statement, read back as Django's own writes would leave
them (JSON that needs quoting, nulls, times, text with every kind of character)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from rescaler.audit.models import AuditEvent
from rescaler.bulk import rows_insert, rows_update
from rescaler.cluster.models import Pipeline, RunnerCommand

pytestmark = pytest.mark.django_db

AWKWARD: list[Any] = [
    None,
    {},
    [],
    {"a": 1, "b": [1, 2.5, None, True], "c": {"d": "e"}},
    {"quote": 'he said "no", then \\ left', "comma": "a,b", "brace": "{x}", "nul": "é ü 漢"},
    ["{", "}", '"', "\\", "NULL", "null"],
    "a string alone",
    12,
    0.5,
    True,
]


def _pipeline() -> Pipeline:
    return Pipeline.objects.create(name="p")


def _read(event: AuditEvent) -> tuple[Any, ...]:
    e = AuditEvent.objects.get(pk=event.pk)
    return (e.actor_name, e.action, e.object_type, e.object_id, e.before, e.after)


def test_inserted_rows_read_back_as_bulk_create_leaves_them_in_order_with_their_keys() -> None:
    made = [
        AuditEvent(
            actor_name=f'runner "{n}"',
            action="step.done",
            object_type="step",
            object_id=f"op/{n}",
            before=value,
            after={"n": n, "v": value},
        )
        for n, value in enumerate(AWKWARD)
    ]
    twins = AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                actor_name=e.actor_name,
                action=e.action,
                object_type=e.object_type,
                object_id=e.object_id,
                before=e.before,
                after=e.after,
            )
            for e in made
        ]
    )
    before = timezone.now()
    inserted = rows_insert(made)
    assert inserted == made
    assert [e.pk for e in made] == sorted(e.pk for e in made)  # in order
    assert all(not e._state.adding for e in made)
    for event, twin in zip(made, twins, strict=True):
        assert _read(event) == _read(twin)
        assert AuditEvent.objects.get(pk=event.pk).at >= before  # auto_now_add ran
        assert event.at is not None


def test_an_empty_insert_writes_nothing() -> None:
    assert rows_insert([]) == []
    assert not AuditEvent.objects.exists()


def test_updated_rows_take_each_value_and_other_rows_stay() -> None:
    pipeline = _pipeline()
    payloads = AWKWARD[1:]  # the column is not null
    commands = RunnerCommand.objects.bulk_create(
        [RunnerCommand(pipeline=pipeline, kind="k", payload={"n": n}) for n in range(len(AWKWARD))]
    )
    kept = commands.pop()
    at = dt.datetime(2026, 11, 27, 8, 30, tzinfo=dt.UTC)
    rows_update(
        RunnerCommand,
        ["status", "detail", "acked_at", "payload"],
        {
            c.pk: ("done", f'said "{n}", {{}}\\ ü', at if n % 2 else None, payloads[n])
            for n, c in enumerate(commands)
        }
        | {10**9: ("done", "no such row", at, {})},
    )
    for n, command in enumerate(commands):
        row = RunnerCommand.objects.get(pk=command.pk)
        assert (row.status, row.detail, row.acked_at) == (
            "done", f'said "{n}", {{}}\\ ü', at if n % 2 else None,
        )  # fmt: skip
        assert row.payload == payloads[n]
    untouched = RunnerCommand.objects.get(pk=kept.pk)
    assert (untouched.status, untouched.payload) == ("pending", kept.payload)
    assert not RunnerCommand.objects.filter(pk=10**9).exists()


def test_an_empty_update_writes_nothing() -> None:
    rows_update(RunnerCommand, ["status"], {})
