"""An operation's steps done: one rule (``counts.step_done``) for every figure of them (issue 48):
the API's ``steps_done`` of the list and of the document (``counts.with_step_counts``, counted
in SQL), the operation page's head and the live delta (``StepCounts``, counted from the step
groups or the rows). A step is done once moved (phase ``done``); a cancelled step ended
without moving and is not done, nor is a step still on its way."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import operation_page
from dashboard.api.selectors.operations import operation_get, operation_list
from dashboard.live import operation_delta
from rescaler.operations import counts
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import make_user, register_cluster
from workers.rescale.protocol import StepPhase

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)


def test_only_a_moved_step_is_done() -> None:
    assert {p for p in StepPhase if counts.step_done(p)} == {StepPhase.DONE}


@pytest.fixture
def op() -> RescaleOperation:
    """An operation of 8 steps of one vnode each, in every phase a step can be in but
    ``planned`` twice and ``done`` twice, so that no figure is right by chance."""
    register_cluster()
    body = {
        "changes": {"word_count": {"added_parallel_units": [2, 3]}},
        "granularity": {"vnodes_per_step": 1},
    }
    op = operation_request(user=make_user("operator", rescale=True), body=body)
    assert isinstance(op, RescaleOperation)
    phases = [
        StepPhase.DONE, StepPhase.DONE, StepPhase.CANCELLED, StepPhase.ACQUIRING,
        StepPhase.COLLECTING, StepPhase.PENDING, StepPhase.PLANNED, StepPhase.PLANNED,
    ]  # fmt: skip
    steps = list(op.steps.order_by("step"))
    assert len(steps) == len(phases)
    for step, phase in zip(steps, phases, strict=True):
        RescaleStep.objects.filter(pk=step.pk).update(phase=phase)
    return op


def figures(op: RescaleOperation) -> dict[str, Any]:
    listed = operation_list().get(pk=op.pk)
    document = operation_get(operation_id=op.operation_id)
    fresh = RescaleOperation.objects.get(pk=op.pk)
    delta = operation_delta(operation=fresh, version=1, columns=[], steps=[], events=[])
    return {
        "api list": (listed.steps_done, listed.steps_total),  # type: ignore[attr-defined]
        "api document": (document.steps_done, document.steps_total),  # type: ignore[attr-defined]
        "page": (
            operation_page.operation_summary(document).steps_done,
            operation_page.operation_summary(document).steps_total,
        ),
        "counted in one query": (counts.step_counts(fresh).done, counts.step_counts(fresh).total),
        "live delta": (delta["operation"]["steps_done"], 8),
    }


def test_every_figure_of_the_steps_done_is_the_same(op: RescaleOperation) -> None:
    assert figures(op) == dict.fromkeys(figures(op), (2, 8))


def test_the_rows_and_the_groups_count_alike(op: RescaleOperation) -> None:
    rows = counts.StepCounts.of_rows(RescaleStep.objects.filter(operation=op))
    assert rows == counts.StepCounts.of_groups(counts.step_groups(op))
    assert (rows.done, rows.known, rows.moving, rows.total) == (2, 6, 3, 8)
