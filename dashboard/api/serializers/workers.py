"""The bodies and answers of the workers' actions: add, cordon and uncordon (a reason), a
preemption notice, drain (docs/elastic-workers.md)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from dashboard.api.serializers.cluster import WorkerInfoSerializer
from dashboard.api.serializers.operation_request import GranularityField
from dashboard.api.serializers.operations import OperationDetailSerializer
from rescaler.runner.workers import CORES_MAX, CORES_MIN, cores_parse, deadline_parse
from workers.rescale import errors
from workers.rescale.protocol import REASON_MAX_CHARS


def _refuse_unknown(data: Any, allowed: set[str]) -> None:
    if not isinstance(data, dict):
        raise errors.MalformedRequest("the request body must be a JSON object")
    unknown = set(data) - allowed
    if unknown:
        raise errors.MalformedRequest(
            f"unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
        )


class WorkerAddSerializer(serializers.Serializer):
    """Validation is the service's own (``cores_parse``): a refusal is 400 malformed_request."""

    cores = serializers.IntegerField(
        min_value=CORES_MIN,
        max_value=CORES_MAX,
        default=1,
        required=False,
        help_text="Cores of the new worker (its PUs: one per core by default).",
    )

    def to_internal_value(self, data: Any) -> Any:
        _refuse_unknown(data, {"cores"})
        return {"cores": cores_parse(data.get("cores", 1))}


class WorkerAddedSerializer(serializers.Serializer):
    provider = serializers.CharField(help_text="The worker provider (local, command).")
    cores = serializers.IntegerField()
    answer = serializers.CharField(help_text="What the provider started (also in the audit).")


class WorkerReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX_CHARS,
        help_text="Why the operator asks: kept in the audit trail.",
    )

    fields_allowed = {"reason"}

    def to_internal_value(self, data: Any) -> Any:
        _refuse_unknown(data, self.fields_allowed)
        reason = data.get("reason", "")
        if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
            raise errors.MalformedRequest(
                f"'reason' must be a text of at most {REASON_MAX_CHARS} characters"
            )
        return {
            "reason": reason,
            **{k: data[k] for k in self.fields_allowed - {"reason"} if k in data},
        }


class WorkerDrainSerializer(WorkerReasonSerializer):
    granularity = GranularityField(required=False)

    fields_allowed = {"reason", "granularity"}


class WorkerNoticeSerializer(WorkerReasonSerializer):
    """Validation is the service's own (``deadline_parse``): a refusal is 400."""

    deadline_s = serializers.FloatField(
        required=False,
        help_text="Seconds from now until the worker goes (1 to 86,400); default "
        "RESCALER_PREEMPTION_DEADLINE_S (120).",
    )

    fields_allowed = {"reason", "deadline_s"}

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if "deadline_s" in value:
            value["deadline_s"] = deadline_parse(value["deadline_s"])
        return value


class WorkerNoticedSerializer(serializers.Serializer):
    worker = WorkerInfoSerializer()
    operation = OperationDetailSerializer(
        allow_null=True,
        help_text="Its drain, started with priority (all at once); null when none started yet "
        "(see waiting_for and detail) or under RESCALER_PREEMPTION_POLICY=cordon.",
    )
    waiting_for = serializers.ListField(
        child=serializers.CharField(),
        help_text="Operations on its fragments asked to cancel: its drain starts when they end.",
    )
    detail = serializers.CharField(allow_blank=True, help_text="Why no drain started, if none.")


class WorkerDrainedSerializer(serializers.Serializer):
    worker = WorkerInfoSerializer()
    operation = OperationDetailSerializer(
        allow_null=True,
        help_text="The live operation that moves every vnode off it; null when no stateful "
        "fragment ran on it (it is decommissioning at once).",
    )
