"""Rescale operations: as listed, and as one operation's document (its plan, steps, per-vnode
figures, the runner's progress, what it waits for and its audit events); and the audit log's
events."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dashboard.api.rows import RowListSerializer, RowSerializer
from dashboard.api.selectors.operations import (
    operation_events,
    operation_runner_progress,
    operation_vnodes,
)
from dashboard.api.serializers.enums import OPERATION_STATUS_CHOICES
from dashboard.api.serializers.operation_request import OperationRequestSerializer
from dashboard.api.serializers.plans import GranularitySerializer, PlanField
from dashboard.format import moved_figures
from rescaler.audit.models import AuditEvent
from rescaler.operations.models import RescaleOperation, RescaleStep, choices
from rescaler.operations.waiting import WaitingFor, operation_waiting
from workers.rescale.protocol import Routing, StopStartPhase


@extend_schema_field(GranularitySerializer)
class StoredGranularityField(serializers.JSONField):
    pass


@extend_schema_field(OperationRequestSerializer)
class StoredRequestField(serializers.JSONField):
    """The request, put back together from the operation's columns (``request_record``)."""

    def get_attribute(self, instance: RescaleOperation) -> Any:
        return instance.request_record().to_json()


class OperationSerializer(serializers.ModelSerializer):
    pipeline: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who asked."
    )
    cancel_requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who asked to cancel."
    )
    request = StoredRequestField(read_only=True)
    granularity = StoredGranularityField(read_only=True)
    fragments = serializers.ListField(child=serializers.CharField(), read_only=True)
    duration_s = serializers.FloatField(read_only=True, allow_null=True)
    steps_total = serializers.IntegerField(read_only=True)
    steps_done = serializers.IntegerField(read_only=True)

    class Meta:
        model = RescaleOperation
        fields = [
            "operation_id", "pipeline", "status", "strategy", "granularity", "fragments", "request",
            "reason", "requested_by", "cancel_requested_by", "created_at", "started_at", "finished_at",
            "duration_s", "outcome", "error_code", "vnodes_moved", "keys_moved", "bytes_moved",
            "steps_total", "steps_done",
        ]  # fmt: skip
        read_only_fields = fields


class StepSerializer(RowSerializer, serializers.ModelSerializer):
    """A step once: as planned (vnodes, PUs, keys, bytes) and as the runner last reported it;
    its vnodes' own figures are the document's ``vnodes``."""

    timings = serializers.DictField(
        child=serializers.FloatField(), read_only=True, help_text="phase -> unix time entered."
    )
    vnodes = serializers.ListField(child=serializers.IntegerField(), read_only=True)

    class Meta:
        model = RescaleStep
        list_serializer_class = RowListSerializer
        fields = [
            "step", "fragment", "source_pu", "target_pu", "vnodes", "key_range_index",
            "key_range_count", "phase", "keys", "bytes",
            "keys_moved", "bytes_moved", "hold_queue", "hold_bytes", "collect_epoch",
            "acquire_epoch",
            "drop_epoch", "timings", "error", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class OperationVnodeSerializer(RowSerializer):
    """A vnode of the operation: its step (whose PUs and phase are the step's) and its own
    figures."""

    fragment = serializers.CharField()
    vnode = serializers.IntegerField()
    step = serializers.IntegerField(help_text="The step that moves it (``steps[].step``).")
    routing = serializers.ChoiceField(
        choices=choices(Routing),
        help_text="Where the vnode's records go now: its source PU, the step's hold queue, "
        "or its target PU.",
    )
    key_range_index = serializers.IntegerField(
        allow_null=True,
        help_text="For a hot vnode cut by key, the key range the step moves (from 0; null: the "
        "whole vnode). The vnode then has a row per key range.",
    )
    key_range_count = serializers.IntegerField(allow_null=True)
    keys = serializers.IntegerField(allow_null=True)
    bytes = serializers.IntegerField(allow_null=True)
    hold_queue = serializers.IntegerField(help_text="Records held for it.")
    hold_bytes = serializers.IntegerField(help_text="Their bytes in the hold queue.")


class RunnerProgressSerializer(serializers.Serializer):
    """What the runner's last report says that no other field of the operation does."""

    status = serializers.ChoiceField(
        choices=OPERATION_STATUS_CHOICES,
        help_text="The runner's status of the operation (the operation's own ends once the "
        "orchestrator has seen it).",
    )
    phase = serializers.ChoiceField(
        choices=choices(StopStartPhase), help_text="A stop-start's phase (a live one: begun)."
    )
    cancel_requested = serializers.BooleanField()
    begun_epoch = serializers.IntegerField(allow_null=True)
    finished_epoch = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    executors = serializers.ListField(
        child=serializers.CharField(), help_text="Where a stop-start's Spark tasks ran."
    )
    hold_queue_full = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Steps whose hold queue reached its bound: the stream waits at the barrier "
        "until their exports are verified (waiting_for hold_queue_full).",
    )


class AuditEventSerializer(RowSerializer, serializers.ModelSerializer):
    actor_name = serializers.CharField(
        help_text='Who acted: a username, or the component ("orchestrator", "runner").'
    )
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)

    class Meta:
        model = AuditEvent
        list_serializer_class = RowListSerializer
        fields = [
            "id", "at", "actor_name", "action", "object_type", "object_id", "before", "after"
        ]  # fmt: skip
        read_only_fields = fields


class WaitingSerializer(serializers.Serializer):
    waiting_for = serializers.ChoiceField(
        choices=[w.value for w in WaitingFor],
        help_text="What the operation waits for now: an orchestrator to take it, the runner "
        "(down or silent), the next epoch barrier, exports in progress, its own pacing, or "
        "the exports of steps whose hold queue is full (the stream waits for them).",
    )
    detail = serializers.CharField(help_text="The same, in a sentence, with what to do if any.")
    stream_idle = serializers.BooleanField(
        help_text="No records in the last epoch: barriers come from the runner's empty epochs."
    )


class MovedSerializer(serializers.Serializer):
    planned = serializers.IntegerField(help_text="As the plan counted them at the start.")
    moved = serializers.IntegerField(help_text="Moved so far, arrivals included.")
    arrived = serializers.IntegerField(
        help_text="Of moved, those that arrived in a vnode while it moved (beyond the plan)."
    )
    share = serializers.FloatField(
        allow_null=True, help_text="Of the plan done (0..1, never over 1); null: nothing planned."
    )
    text = serializers.CharField(help_text="The same in words, as the console prints it.")


class OperationMovedSerializer(serializers.Serializer):
    keys = MovedSerializer()
    bytes = MovedSerializer()
    vnodes = MovedSerializer()


class OperationDetailSerializer(OperationSerializer):
    plan = PlanField(read_only=True)
    progress = serializers.SerializerMethodField(
        help_text="The runner's last report, beyond the steps and counters (null before it)."
    )
    steps = StepSerializer(many=True, read_only=True)
    vnodes = serializers.SerializerMethodField()
    events = serializers.SerializerMethodField()
    waiting = serializers.SerializerMethodField()
    moved = serializers.SerializerMethodField()

    class Meta(OperationSerializer.Meta):
        fields = [
            *OperationSerializer.Meta.fields, "progress_version", "waiting", "moved", "plan",
            "progress", "steps", "vnodes", "events",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(OperationMovedSerializer)
    def get_moved(self, op: RescaleOperation) -> dict[str, Any]:
        return moved_figures(op)

    @extend_schema_field(WaitingSerializer(allow_null=True))
    def get_waiting(self, op: RescaleOperation) -> dict[str, Any] | None:
        waiting = operation_waiting(op)
        return None if waiting is None else waiting.to_json()

    @extend_schema_field(RunnerProgressSerializer(allow_null=True))
    def get_progress(self, op: RescaleOperation) -> dict[str, Any] | None:
        if not op.progress:
            return None
        return dict(RunnerProgressSerializer(operation_runner_progress(op)).data)

    @extend_schema_field(OperationVnodeSerializer(many=True))
    def get_vnodes(self, op: RescaleOperation) -> list[Any]:
        return list(OperationVnodeSerializer(operation_vnodes(operation=op), many=True).data)

    @extend_schema_field(AuditEventSerializer(many=True))
    def get_events(self, op: RescaleOperation) -> list[Any]:
        return list(AuditEventSerializer(operation_events(operation=op), many=True).data)
