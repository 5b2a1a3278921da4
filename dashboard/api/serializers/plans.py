"""A plan: as a dry run answers it (summed up per PU, with the ``plan_id`` that starts it) and as
an operation keeps it (each move)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dashboard.api.serializers.enums import CHANGE_KIND_CHOICES, STRATEGY_CHOICES
from rescaler.operations.models import RescaleOperation
from workers.rescale.protocol import HOT_VNODES_ORDERS


class GranularitySerializer(serializers.Serializer):
    vnodes_per_step = serializers.IntegerField()
    max_keys_per_step = serializers.IntegerField(allow_null=True)
    max_bytes_per_step = serializers.IntegerField(allow_null=True)
    steps_in_flight = serializers.IntegerField()
    bytes_per_second = serializers.FloatField(allow_null=True)
    hot_vnodes = serializers.ChoiceField(choices=list(HOT_VNODES_ORDERS), allow_null=True)


class MoveSerializer(serializers.Serializer):
    fragment = serializers.CharField()
    vnode = serializers.IntegerField()
    source_pu = serializers.IntegerField()
    target_pu = serializers.IntegerField()
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()


class BalanceSerializer(serializers.Serializer):
    vnodes_per_pu = serializers.DictField(child=serializers.IntegerField())
    bytes_per_pu = serializers.DictField(child=serializers.IntegerField())
    max_vnodes_minus_min = serializers.IntegerField()
    max_bytes_over_mean = serializers.FloatField(allow_null=True)


class FragmentPlanSerializer(serializers.Serializer):
    fragment = serializers.CharField()
    kind = serializers.ChoiceField(choices=CHANGE_KIND_CHOICES)
    parallel_units_before = serializers.ListField(child=serializers.IntegerField())
    parallel_units_after = serializers.ListField(child=serializers.IntegerField())
    moves = MoveSerializer(many=True)
    vnodes_moved = serializers.IntegerField()
    keys_moved = serializers.IntegerField()
    bytes_moved = serializers.IntegerField()
    balance_before = BalanceSerializer()
    balance_after = BalanceSerializer()
    mapping_before = serializers.ListField(child=serializers.IntegerField())
    mapping_after = serializers.ListField(child=serializers.IntegerField())
    load = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text='Measured load per vnode: {"<vnode>": [keys, bytes]}.',
    )


class PuMovesSerializer(serializers.Serializer):
    parallel_unit = serializers.IntegerField()
    vnodes = serializers.IntegerField()
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()


class FragmentPlanSummarySerializer(serializers.Serializer):
    fragment = serializers.CharField()
    kind = serializers.ChoiceField(choices=CHANGE_KIND_CHOICES)
    parallel_units_before = serializers.ListField(child=serializers.IntegerField())
    parallel_units_after = serializers.ListField(child=serializers.IntegerField())
    vnodes_moved = serializers.IntegerField()
    keys_moved = serializers.IntegerField()
    bytes_moved = serializers.IntegerField()
    vnodes_cut = serializers.IntegerField(
        default=0,
        help_text="Hot vnodes over max_keys_per_step or max_bytes_per_step, moved key range by "
        "key range (only the range in flight is held).",
    )
    key_range_steps = serializers.IntegerField(
        default=0, help_text="The steps that move those vnodes' key ranges, one range each."
    )
    balance_before = BalanceSerializer()
    balance_after = BalanceSerializer()
    sources = PuMovesSerializer(
        many=True, help_text="Per source PU, by PU: the vnodes (keys, bytes) leaving it."
    )
    targets = PuMovesSerializer(
        many=True,
        help_text="Per target PU, by PU: the vnodes (keys, bytes) it takes. Each move, vnode "
        "by vnode, is in the operation once started (GET operations/{operation_id}).",
    )


class DryRunSerializer(serializers.Serializer):
    """A dry run's answer: a summary of the plan, and the ``plan_id`` that starts exactly it
    (the whole plan is kept on the server; its size grows with the PUs, not with the moves)."""

    strategy = serializers.ChoiceField(choices=STRATEGY_CHOICES)
    granularity = GranularitySerializer(
        help_text="The granularity the steps were cut by: the request's, with vnodes_per_step "
        "and steps_in_flight chosen from the plan's size where it left them out."
    )
    granularity_reason = serializers.CharField(
        help_text="Why the planner chose those figures; empty when the request set them."
    )
    fragments = serializers.DictField(child=FragmentPlanSummarySerializer())
    steps_total = serializers.IntegerField(help_text="Steps of the plan (0 with stop_start).")
    estimated_duration_s = serializers.FloatField()

    plan_id = serializers.CharField(
        help_text="Send it with the same body (without dry_run) to start exactly this plan."
    )
    expires_at = serializers.DateTimeField(help_text="The plan_id starts nothing after this.")
    mapping_versions = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Per fragment, the mapping version the plan was computed from: the plan is "
        "stale once one moves.",
    )

    def to_representation(self, instance: Any) -> Any:
        return {
            **instance.plan,
            "plan_id": instance.plan_id,
            "expires_at": serializers.DateTimeField().to_representation(instance.expires_at),
            "mapping_versions": instance.mapping_versions,
        }


class OperationPlanSerializer(serializers.Serializer):
    """What an operation's plan says beyond its columns and steps: each fragment's plan and
    the estimate (its strategy and granularity are the operation's, its steps ``steps``)."""

    fragments = serializers.DictField(child=FragmentPlanSerializer())
    estimated_duration_s = serializers.FloatField()
    granularity_reason = serializers.CharField(
        required=False,
        help_text="Why the planner chose the operation's vnodes_per_step and steps_in_flight; "
        "empty when the request set them (absent on operations planned before it was kept).",
    )


@extend_schema_field(OperationPlanSerializer)
class PlanField(serializers.JSONField):
    """The plan as stored with the operation (``Plan.stored_json``): nothing another field of
    the document carries."""

    def get_attribute(self, instance: RescaleOperation) -> Any:
        return instance.plan
