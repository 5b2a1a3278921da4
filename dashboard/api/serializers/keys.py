"""``GET fragments/<fragment>/keys/<key>``: where one key lives, its migration and its state."""

from __future__ import annotations

from rest_framework import serializers

from dashboard.api.serializers.enums import STEP_PHASE_CHOICES
from rescaler.operations.models import choices
from workers.rescale.protocol import Routing


class KeyQuerySerializer(serializers.Serializer):
    pipeline = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Needed only when two pipelines have a fragment of that name.",
    )


class KeyMigrationSerializer(serializers.Serializer):
    operation_id = serializers.CharField()
    step = serializers.IntegerField()
    source_pu = serializers.IntegerField()
    target_pu = serializers.IntegerField()
    phase = serializers.ChoiceField(choices=STEP_PHASE_CHOICES)
    routing = serializers.ChoiceField(choices=choices(Routing))


class KeyStateSerializer(serializers.Serializer):
    pipeline = serializers.CharField()
    fragment = serializers.CharField()
    key = serializers.CharField()
    vnode = serializers.IntegerField()
    parallel_unit = serializers.IntegerField(
        allow_null=True, help_text="The PU that owns the key's vnode."
    )
    mapping_version = serializers.IntegerField()
    exists = serializers.BooleanField(help_text="Whether the key has state.")
    value = serializers.JSONField(allow_null=True, help_text="The operator's state of the key.")
    as_of_epoch = serializers.IntegerField(
        allow_null=True,
        help_text="How fresh the answer is: the last epoch the owner's store had committed when "
        "it was read (null when the store holds no epoch yet or could not be read).",
    )
    state_error = serializers.CharField(
        allow_null=True,
        help_text="Why the state directory could not be read (then exists is false and vnode, "
        "parallel_unit and mapping_version come from Postgres).",
    )
    migration = KeyMigrationSerializer(
        allow_null=True, help_text="The step of an active operation moving this key's vnode."
    )
