"""Query-string filters of the API's lists (django-filter; documented in the schema)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django import forms
from django.db.models import Q, QuerySet, Value
from django.db.models.functions import Left, StrIndex
from django_filters.fields import IsoDateTimeField

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.model import DecisionKind, Mode
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.cluster.models import Worker
from rescaler.operations.models import RescaleOperation, choices
from workers.rescale.protocol import AuditObject, OperationStatus, Strategy


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, in UTC: Postgres refuses offsets beyond ±15:59 that Python accepts."""

    def to_python(self, value: Any) -> dt.datetime | None:
        parsed: dt.datetime | None = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(dt.UTC)
        except OverflowError:
            raise forms.ValidationError("the time is out of range", code="invalid") from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class OperationFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(
        choices=choices(OperationStatus), help_text="One or more statuses (repeat it)."
    )
    fragment = django_filters.CharFilter(
        method="filter_fragment", help_text="Operations that change this fragment."
    )
    pipeline = django_filters.CharFilter(field_name="pipeline__name")
    requester = django_filters.CharFilter(
        field_name="requested_by__username", help_text="Username of who asked."
    )
    strategy = django_filters.ChoiceFilter(choices=choices(Strategy))
    created_after = UtcDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="ISO 8601, inclusive."
    )
    created_before = UtcDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="ISO 8601, exclusive."
    )

    class Meta:
        model = RescaleOperation
        fields: list[str] = []

    def filter_fragment(
        self, queryset: QuerySet[RescaleOperation], name: str, value: str
    ) -> QuerySet[RescaleOperation]:
        return queryset.filter(fragments__contains=[value])


class AuditFilter(django_filters.FilterSet):
    actor = django_filters.CharFilter(
        field_name="actor_name", help_text='A username, or "orchestrator", "runner".'
    )
    action = django_filters.CharFilter(help_text="Exact action, e.g. operation.requested.")
    action_prefix = django_filters.CharFilter(
        field_name="action", lookup_expr="startswith", help_text='e.g. "step." or "operation."'
    )
    object_type = django_filters.ChoiceFilter(
        choices=choices(AuditObject), help_text="The kind of object: operation, step, ..."
    )
    object_id = django_filters.CharFilter(
        method="filter_object_id",
        help_text="An object id; for an operation's operation_id, its steps' events are included.",
    )
    operation = django_filters.CharFilter(
        method="filter_operation",
        help_text="An operation_id: the operation's events and its steps'.",
    )
    pipeline = django_filters.CharFilter(
        method="filter_pipeline",
        help_text="A pipeline's name: its own events (snapshots, commands, archive), its "
        "operations' and their steps', and its workers'.",
    )
    at_after = UtcDateTimeFilter(
        field_name="at", lookup_expr="gte", help_text="ISO 8601, inclusive."
    )
    at_before = UtcDateTimeFilter(
        field_name="at", lookup_expr="lt", help_text="ISO 8601, exclusive."
    )

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def filter_object_id(
        self, queryset: QuerySet[AuditEvent], name: str, value: str
    ) -> QuerySet[AuditEvent]:
        return queryset.filter(object_id=value) | queryset.filter(
            object_type=AuditObject.STEP, object_id__startswith=f"{value}/"
        )

    def filter_operation(
        self, queryset: QuerySet[AuditEvent], name: str, value: str
    ) -> QuerySet[AuditEvent]:
        return queryset.filter(
            Q(object_type=AuditObject.OPERATION, object_id=value)
            | Q(object_type=AuditObject.STEP, object_id__startswith=f"{value}/")
        )

    def filter_pipeline(
        self, queryset: QuerySet[AuditEvent], name: str, value: str
    ) -> QuerySet[AuditEvent]:
        """An event names its object, not its pipeline: the pipeline's own events, and those
        of the operations, steps (``<operation_id>/<step>``) and workers that belong to it."""
        operations = RescaleOperation.objects.filter(pipeline__name=value).values("operation_id")
        workers = Worker.objects.filter(pipeline__name=value).values("name")
        step_operation = Left("object_id", StrIndex("object_id", Value("/")) - 1)
        steps = queryset.filter(object_type=AuditObject.STEP).annotate(
            step_operation=step_operation
        )
        return queryset.filter(
            Q(object_type=AuditObject.PIPELINE, object_id=value)
            | Q(object_type=AuditObject.OPERATION, object_id__in=operations)
            | Q(object_type=AuditObject.WORKER, object_id__in=workers)
            | Q(pk__in=steps.filter(step_operation__in=operations).values("pk"))
        )


class DecisionFilter(django_filters.FilterSet):
    """The autoscaler's decisions: the API's per pipeline, the history page's of them all."""

    kind = django_filters.ChoiceFilter(
        choices=choices(DecisionKind), help_text="scale, rebalance or no_change."
    )
    mode = django_filters.ChoiceFilter(choices=choices(Mode), help_text="The policy's mode.")
    outcome = django_filters.MultipleChoiceFilter(
        choices=AutoscalingDecision.Outcome.choices, help_text="One or more outcomes (repeat it)."
    )
    decided_after = UtcDateTimeFilter(
        field_name="decided_at", lookup_expr="gte", help_text="ISO 8601, inclusive."
    )
    decided_before = UtcDateTimeFilter(
        field_name="decided_at", lookup_expr="lt", help_text="ISO 8601, exclusive."
    )

    class Meta:
        model = AutoscalingDecision
        fields: list[str] = []
