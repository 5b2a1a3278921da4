"""``GET /api/v1/pipelines/<name>/autoscaling/decisions``: the history of the autoscaler's
decisions for a pipeline, newest first, paginated and filtered like the other lists
(docs/autoscaling.md, "The history of decisions"); ``?format=csv`` (``Accept: text/csv``): every
decision the filters match, as the audit's and the operations' CSV are. The view calls one
selector of ``rescaler.autoscaling.decisions`` and serializes what it returns."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.api.autoscaling import (
    DECISION_KIND_CHOICES,
    MODE_CHOICES,
    FragmentDecisionSerializer,
)
from dashboard.api.csv import DECISION_COLUMNS, CSVListView, decision_rows
from dashboard.api.errors import error_responses, pipeline_name
from dashboard.api.filters import DecisionFilter
from dashboard.api.pagination import Pagination
from dashboard.api.permissions import CanRescale
from dashboard.api.serializers.enums import OPERATION_STATUS_CHOICES
from rescaler.autoscaling.decisions import decision_list
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.autoscaling.recommendation import recommendation_workers_request
from rescaler.autoscaling.selectors import pipeline_get

# the choices of the schema's enum (SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]): this very list
DECISION_OUTCOME_CHOICES = [value for value, _ in AutoscalingDecision.Outcome.choices]


class DecisionOperationSerializer(serializers.Serializer):
    operation_id = serializers.CharField()
    status = serializers.ChoiceField(
        choices=OPERATION_STATUS_CHOICES, help_text="How the operation stands, or ended."
    )
    outcome = serializers.CharField(help_text="The operation's outcome, once it ended.")


class AutoscalingDecisionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    pipeline = serializers.CharField(source="pipeline.name")
    decided_at = serializers.DateTimeField()
    mode = serializers.ChoiceField(choices=MODE_CHOICES, help_text="The policy's mode then.")
    kind = serializers.ChoiceField(choices=DECISION_KIND_CHOICES)
    reasons = serializers.ListField(child=serializers.CharField())
    fragments = FragmentDecisionSerializer(
        many=True,
        help_text="Per stateful fragment: the PUs now, after and needed, the predicted "
        "utilisation, and the signals the decision rests on (estimate).",
    )
    missing_signals = serializers.DictField(child=serializers.CharField())
    request = serializers.DictField(
        allow_null=True, help_text="The body of POST /api/v1/operations that applies it."
    )
    plan_id = serializers.CharField(
        allow_null=True, help_text="The binding dry run it was started from (null: none)."
    )
    outcome = serializers.ChoiceField(
        choices=DECISION_OUTCOME_CHOICES,
        help_text="none (no change); proposed (waits for apply); applied (by applied_by); "
        "started (auto mode); superseded (another decision came first); refused (auto mode "
        "could not start it: outcome_reason, error_code); awaiting_workers (the worker "
        "provider was asked for the PUs it needs: it starts once they joined); failed (they "
        "did not join in time: outcome_reason).",
    )
    outcome_reason = serializers.CharField()
    error_code = serializers.CharField(help_text="A refusal's code (empty otherwise).")
    outcome_at = serializers.DateTimeField(allow_null=True)
    applied_by = serializers.CharField(allow_null=True, source="applied_by.username", default=None)
    workers_requested = serializers.IntegerField(
        help_text="The workers asked of the worker provider for the PUs it needed (asked once, "
        "at workers_requested_at; 0: none, or the provider refused)."
    )
    workers_requested_at = serializers.DateTimeField(
        allow_null=True, help_text="When the worker provider was asked (null: never)."
    )
    workers_released = serializers.ListField(
        child=serializers.CharField(),
        help_text="The workers its completed scale-in emptied, drained and removed.",
    )
    operation = DecisionOperationSerializer(
        allow_null=True, help_text="The operation it started, and how it stands or ended."
    )

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        data["plan_id"] = data["plan_id"] or None
        return data


class DecisionListView(CSVListView):
    """A pipeline's autoscaling decisions (``?format=csv``: all of them the filters match)."""

    serializer_class = AutoscalingDecisionSerializer
    filterset_class = DecisionFilter
    pagination_class = Pagination
    csv_filename = "decisions.csv"
    csv_columns = DECISION_COLUMNS

    def csv_rows(self, queryset: Any) -> Any:
        return decision_rows(queryset)

    def csv_name(self) -> str:
        """``decisions-<pipeline>.csv``, the name kept to characters safe in a file name."""
        name = re.sub(r"[^A-Za-z0-9._-]", "_", str(self.kwargs.get("name", "")))
        return f"decisions-{name}.csv" if name else self.csv_filename

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # the schema's generation
            return AutoscalingDecision.objects.none()
        return decision_list(pipeline=pipeline_get(name=pipeline_name(self.kwargs["name"])))

    @extend_schema(
        operation_id="pipelines_autoscaling_decisions_list",
        summary="A pipeline's autoscaling decisions",
        description="The history of the autoscaler's decisions for the pipeline, newest first, "
        "paginated: one entry each time the decision differs from the last one (its mode, kind "
        "or any fragment's PUs), with the signals it rests on and its outcome, and the "
        "operation it started with that operation's status. With ?format=csv (or Accept: "
        "text/csv): every matching decision as CSV.",
        responses={
            (200, "application/json"): AutoscalingDecisionSerializer(many=True),
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="With ?format=csv (or Accept: text/csv): every matching decision, "
                f"unpaginated, columns {', '.join(DECISION_COLUMNS)} (reasons, missing_signals, "
                "fragments and request as JSON).",
            ),
            **error_responses(400, 401, 404, 406, media_type="application/json"),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class RecommendationWorkersView(APIView):
    """ "Apply" on a recommendation short of PUs: the worker provider asked for its workers."""

    permission_classes = [IsAuthenticated, CanRescale]

    @extend_schema(
        operation_id="pipelines_recommendation_workers_create",
        summary="Ask the worker provider for the workers a recommendation needs",
        description="Apply for a recommendation whose workers_needed is above 0: asks the "
        "worker provider for that many workers, once per decision (asked again, the same "
        "decision is answered and nothing more is asked); the decision, applied by the "
        "caller, is then awaiting_workers and its rescale starts once they joined (their PUs "
        "bootstrapped), or it fails after RESCALER_AUTOSCALING_WORKER_JOIN_S. Audited as "
        "autoscaling.workers_requested (and worker.add_requested per worker). 409 "
        "nothing_to_start when the cluster has the PUs (apply the plan instead). Needs the "
        "operations.rescale permission.",
        request=None,
        responses={
            202: OpenApiResponse(AutoscalingDecisionSerializer, description="The decision."),
            **error_responses(401, 403, 404, 409),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        row = recommendation_workers_request(user=request.user, pipeline=pipeline_name(name))
        return Response(
            AutoscalingDecisionSerializer(decision_list().get(pk=row.pk)).data,
            status=status.HTTP_202_ACCEPTED,
        )
