"""``/api/v1/pipelines/<name>/autoscaling`` (a pipeline's autoscaling policy, read and set) and
``/api/v1/pipelines/<name>/recommendation`` (the decision on its signals now, with the binding
dry run that applies it; docs/autoscaling.md). Each view validates, calls one service or
selector of ``rescaler.autoscaling`` and serializes what it returns."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.api.errors import error_responses, pipeline_name
from dashboard.api.parsers import StrictJSONParser
from dashboard.api.permissions import POLICY_PERMISSION, RESCALE_PERMISSION, CanRescale
from dashboard.api.serializers.plans import DryRunSerializer
from rescaler.autoscaling.decisions import fragment_json
from rescaler.autoscaling.model import DecisionKind, Mode, Policy
from rescaler.autoscaling.recommendation import Recommendation, recommendation_get
from rescaler.autoscaling.selectors import autoscaling_policy_get, pipeline_get, policy_json
from rescaler.autoscaling.services import POLICY_SETTINGS, autoscaling_policy_update
from workers.rescale import errors

# the choices of the schema's enums (SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]): this very list
DECISION_KIND_CHOICES = [k.value for k in DecisionKind]
MODE_CHOICES = [m.value for m in Mode]


class CanSetPolicy(CanRescale):
    """Changing a policy is an admin's: ``autoscaling.change_autoscalingpolicy`` (in auto mode
    the policy starts rescales by itself); reads pass through."""

    permission = POLICY_PERMISSION
    message = f"changing an autoscaling policy needs the {POLICY_PERMISSION} permission"


# -- the policy ----------------------------------------------------------------------------------
class HoursField(serializers.ListField):
    """A list of whole hours, refused in one message (a ListField's per-item messages would
    nest under the item's index, which the Error schema's ``errors`` does not take)."""

    def to_internal_value(self, data: Any) -> list[int]:
        if (
            not isinstance(data, list)
            or len(data) > 24
            or any(not isinstance(h, int) or isinstance(h, bool) for h in data)
        ):
            raise serializers.ValidationError("a list of at most 24 whole hours, 0 to 23 (UTC)")
        return list(data)


class AutoscalingPolicySerializer(serializers.Serializer):
    pipeline = serializers.CharField(read_only=True)
    mode = serializers.ChoiceField(
        choices=MODE_CHOICES,
        help_text="off: nothing is decided; recommend: decisions are proposed as binding dry "
        "runs, started on apply; auto: started by the autoscaler within the guard rails.",
    )
    target_utilisation = serializers.FloatField(
        help_text="The busy share of its time a PU should run at, in (0, 1]."
    )
    min_parallel_units = serializers.IntegerField(help_text="Fewest PUs per fragment (>= 1).")
    max_parallel_units = serializers.IntegerField(
        help_text="Most PUs per fragment (>= min_parallel_units, at most 65,536)."
    )
    max_step = serializers.IntegerField(
        help_text="Most PUs one decision adds to or removes from a fragment."
    )
    stabilisation_s = serializers.FloatField(
        help_text="The window: every epoch in it must agree before anything is decided."
    )
    cooldown_s = serializers.FloatField(
        help_text="After an operation of the pipeline ends, nothing is decided for this long."
    )
    catch_up_s = serializers.FloatField(
        help_text="The source's backlog should be processed within this many seconds."
    )
    scale_in_blackout_hours = HoursField(
        child=serializers.IntegerField(),
        max_length=24,
        help_text="UTC hours (0-23) at which no scale-in is proposed.",
    )


class AutoscalingPolicyUpdateSerializer(AutoscalingPolicySerializer):
    """Any of the settings; those left out keep their value. Unknown fields or a body that is
    not an object: 400 malformed_request; a wrong type: 400 invalid_parameters; a policy that
    cannot hold (min above max, a target outside (0, 1]...): 400 invalid_policy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, partial=True, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise errors.MalformedRequest("the request body must be a JSON object")
        unknown = set(data) - set(POLICY_SETTINGS)
        if unknown:
            raise errors.MalformedRequest(
                f"unknown field(s) {sorted(unknown)}; allowed: {sorted(POLICY_SETTINGS)}"
            )
        return super().to_internal_value(data)


def _policy_data(pipeline: str, policy: Policy) -> dict[str, Any]:
    return AutoscalingPolicySerializer({"pipeline": pipeline, **policy_json(policy)}).data


class AutoscalingPolicyView(APIView):
    """A pipeline's autoscaling policy."""

    permission_classes = [IsAuthenticated, CanSetPolicy]
    parser_classes = [StrictJSONParser]

    @extend_schema(
        operation_id="pipelines_autoscaling_retrieve",
        summary="A pipeline's autoscaling policy",
        description="The policy the autoscaler decides under; the default one (mode off) "
        "while none was set.",
        responses={200: AutoscalingPolicySerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        pipeline = pipeline_get(name=pipeline_name(name))
        return Response(_policy_data(pipeline.name, autoscaling_policy_get(pipeline=pipeline)))

    @extend_schema(
        operation_id="pipelines_autoscaling_update",
        summary="Set a pipeline's autoscaling policy",
        description="Sets the settings sent (the others keep their value), all or nothing: "
        "400 invalid_policy names each setting that cannot hold (in field and errors). "
        "Audited as autoscaling.policy_updated with the policy before and after (a policy "
        "that changes nothing records nothing). Needs the autoscaling.change_autoscalingpolicy permission (the admin role).",
        request=AutoscalingPolicyUpdateSerializer,
        examples=[
            OpenApiExample(
                "recommend between 2 and 8 PUs",
                value={
                    "mode": "recommend",
                    "target_utilisation": 0.7,
                    "min_parallel_units": 2,
                    "max_parallel_units": 8,
                },
                request_only=True,
            )
        ],
        responses={
            200: AutoscalingPolicySerializer,
            **error_responses(400, 401, 403, 404, 413, 415),
        },
    )
    def put(self, request: Request, name: str) -> Response:
        body = AutoscalingPolicyUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pipeline = pipeline_name(name)
        policy = autoscaling_policy_update(
            user=request.user, pipeline=pipeline, changes=body.validated_data
        )
        return Response(_policy_data(pipeline, policy))


# -- the recommendation --------------------------------------------------------------------------
class FragmentEstimateSerializer(serializers.Serializer):
    window_epochs = serializers.IntegerField(help_text="Epochs of the window.")
    window_s = serializers.FloatField(help_text="Wall time those epochs stand for.")
    input_rate = serializers.FloatField(help_text="Records per second arriving.")
    true_rate_per_pu = serializers.FloatField(
        allow_null=True, help_text="Records per busy second of one PU (null: not measured)."
    )
    busy_fraction = serializers.FloatField(
        allow_null=True, help_text="Busy share of the PUs' time (null: not measured)."
    )
    backlog = serializers.IntegerField(
        allow_null=True, help_text="Records the source holds (null: not reported)."
    )
    epoch_latency_s = serializers.FloatField(help_text="Mean epoch duration of the window.")
    skew = serializers.FloatField(
        help_text="Busiest PU's records over the mean PU's: the window's lowest."
    )
    demand = serializers.FloatField(
        help_text="Records per second to keep up with: the input rate, plus the backlog over "
        "the catch-up time when the PUs it has would not drain it in time."
    )


class FragmentDecisionSerializer(serializers.Serializer):
    fragment = serializers.CharField()
    kind = serializers.ChoiceField(choices=DECISION_KIND_CHOICES)
    parallel_units_now = serializers.IntegerField()
    parallel_units_after = serializers.IntegerField()
    parallel_units_needed = serializers.IntegerField(
        allow_null=True,
        help_text="DS2's figure before the policy's bounds (null: it could not be computed).",
    )
    predicted_utilisation = serializers.FloatField(
        allow_null=True, help_text="Busy share of the PUs' time at parallel_units_after."
    )
    predicted_skew = serializers.FloatField(
        allow_null=True, help_text="A rebalance: the skew a weighted placement would leave."
    )
    load_per_pu_now = serializers.DictField(
        child=serializers.FloatField(),
        help_text="A rebalance: records per epoch of each PU now (by PU number).",
    )
    reasons = serializers.ListField(child=serializers.CharField())
    estimate = FragmentEstimateSerializer(allow_null=True)


class RecommendationSerializer(serializers.Serializer):
    pipeline = serializers.CharField()
    computed_at = serializers.DateTimeField()
    policy = AutoscalingPolicySerializer()
    kind = serializers.ChoiceField(
        choices=DECISION_KIND_CHOICES,
        help_text="scale: a fragment needs another number of PUs; rebalance: the size is "
        "right, the load is not spread; no_change.",
    )
    reasons = serializers.ListField(
        child=serializers.CharField(), help_text="Why, fragment by fragment."
    )
    missing_signals = serializers.DictField(
        child=serializers.CharField(),
        help_text="Signals the runner does not report (busy_s, backlog), and what is needed.",
    )
    fragments = FragmentDecisionSerializer(many=True)
    request = serializers.DictField(
        allow_null=True,
        help_text="The body of POST /api/v1/operations that applies it: send it with "
        "plan.plan_id to start exactly the plan shown (null: nothing to apply).",
    )
    plan = DryRunSerializer(
        allow_null=True,
        help_text="The binding dry run of request (null: no change of size, or planning it "
        "needs the operations.rescale permission, or it cannot be planned now: see notes).",
    )
    notes = serializers.ListField(
        child=serializers.CharField(),
        help_text="What kept the request or its plan from being what was decided.",
    )
    workers_needed = serializers.IntegerField(
        help_text="The workers the decision needs beyond the PUs the cluster has free: auto "
        "mode asks the worker provider for them, and in recommend mode apply does "
        "(POST pipelines/{name}/recommendation/workers); 0: none."
    )
    decision_id = serializers.IntegerField(
        allow_null=True,
        help_text="This decision in the history (GET pipelines/{name}/autoscaling/decisions), "
        "where its outcome is followed; null in mode off, where nothing is decided.",
    )


def recommendation_json(recommendation: Recommendation) -> dict[str, Any]:
    """The recommendation as the API answers it (the console draws the same)."""
    decision = recommendation.decision
    return RecommendationSerializer(
        {
            "pipeline": recommendation.pipeline,
            "computed_at": recommendation.computed_at,
            "policy": {"pipeline": recommendation.pipeline, **policy_json(recommendation.policy)},
            "kind": decision.kind.value,
            "reasons": list(decision.reasons),
            "missing_signals": dict(decision.missing_signals),
            "fragments": [fragment_json(f) for f in decision.fragments.values()],
            "request": recommendation.request,
            "plan": recommendation.plan,
            "notes": list(recommendation.notes),
            "workers_needed": recommendation.workers_needed,
            "decision_id": recommendation.recorded.pk if recommendation.recorded else None,
        }
    ).data


class RecommendationView(APIView):
    """The autoscaler's decision on a pipeline's signals now."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="pipelines_recommendation_retrieve",
        summary="The autoscaler's recommendation for a pipeline",
        description="The decision model's answer on the pipeline's current signals under its "
        "policy: per stateful fragment the PUs it needs (DS2's one step), a rebalance when "
        "skew is the problem, or no change, each with its reasons and the figures it rests "
        "on, and the signals the runner does not report. A change of size comes with the "
        "request that applies it and, for a user with operations.rescale, its binding dry "
        "run (plan): POST /api/v1/operations with request and plan_id starts exactly that "
        "plan. Asked again while that plan may start, the same plan is answered.",
        responses={200: RecommendationSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, name: str) -> Response:
        recommendation = recommendation_get(
            user=request.user,
            pipeline=pipeline_name(name),
            plan=request.user.has_perm(RESCALE_PERMISSION),
        )
        return Response(recommendation_json(recommendation))
