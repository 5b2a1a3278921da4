"""The Django admin cannot forge or erase the audit trail, nor change the cluster behind it.

Every test signs in as a superuser (pytest-django's ``admin_client``): a superuser passes every
permission check of the admin, so what is refused here is refused for everyone. Each tries the
admin's own pages: add, change (a POST of the change form), delete, and the changelist's bulk
"delete selected" action.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record
from rescaler.cluster.models import (
    EpochMetric,
    Fragment,
    ParallelUnit,
    Pipeline,
    RunnerCommand,
    VnodeMapping,
    Worker,
)
from rescaler.operations.models import RescaleOperation
from tests.unit.api.fixtures import make_user, register_cluster, token_client

pytestmark = pytest.mark.django_db


def _url(model: type[Model], view: str, *args: Any) -> str:
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


@pytest.fixture
def operation() -> RescaleOperation:
    """An operation requested over the API, with its audit events."""
    register_cluster()
    client = token_client(make_user("operator", rescale=True))
    response = client.post(
        "/api/v1/operations",
        {"changes": {"word_count": {"added_parallel_units": [2]}}},
        format="json",
    )
    assert response.status_code == 202, response.content
    return RescaleOperation.objects.get(operation_id=response.json()["operation_id"])


def _every_object(operation: RescaleOperation) -> list[Model]:
    pipeline = Pipeline.objects.get()
    command = RunnerCommand.objects.create(pipeline=pipeline, kind="stop")
    event = audit_record(actor_name="runner", action="step.done", obj=("step", "x/1"))
    return [
        event,
        operation,
        pipeline,
        Worker.objects.first(),
        ParallelUnit.objects.first(),
        Fragment.objects.get(name="word_count"),
        VnodeMapping.objects.first(),
        EpochMetric.objects.first(),
        command,
    ]


def _snapshot(obj: Model) -> dict[str, Any]:
    fresh = type(obj).objects.get(pk=obj.pk)
    return {f.attname: getattr(fresh, f.attname) for f in fresh._meta.concrete_fields}


def test_a_superuser_can_read_but_not_add_change_or_delete(
    admin_client: Client, operation: RescaleOperation
) -> None:
    objects = _every_object(operation)
    events_before = AuditEvent.objects.count()
    for obj in objects:
        model = type(obj)
        before = _snapshot(obj)
        assert admin_client.get(_url(model, "changelist")).status_code == 200, model
        page = admin_client.get(_url(model, "change", obj.pk))
        assert page.status_code == 200, model
        assert b'name="_save"' not in page.content, f"{model.__name__} offers a save button"
        assert admin_client.get(_url(model, "add")).status_code == 403, model
        assert admin_client.post(_url(model, "add"), {}).status_code == 403, model
        assert admin_client.post(_url(model, "change", obj.pk), {}).status_code == 403, model
        assert admin_client.get(_url(model, "delete", obj.pk)).status_code == 403, model
        assert admin_client.post(_url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
        admin_client.post(
            _url(model, "changelist"),
            {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"},
        )
        assert _snapshot(obj) == before, f"{model.__name__} was changed through the admin"
    assert AuditEvent.objects.count() == events_before


def test_the_changelists_offer_no_delete_action(
    admin_client: Client, operation: RescaleOperation
) -> None:
    for obj in _every_object(operation):
        page = admin_client.get(_url(type(obj), "changelist"))
        assert b"delete_selected" not in page.content, type(obj).__name__
