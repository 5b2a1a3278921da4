"""``/api/v1/workers``: the elastic workers (docs/elastic-workers.md): list them, add one, cordon
and uncordon one, a preemption notice, drain one."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse as api_reverse
from rest_framework.views import APIView

from dashboard.api.errors import error_responses, path_text
from dashboard.api.parsers import StrictJSONParser
from dashboard.api.permissions import CanRescale
from dashboard.api.selectors.cluster import worker_list
from dashboard.api.selectors.operations import operation_get
from dashboard.api.serializers.cluster import ClusterQuerySerializer, WorkerInfoSerializer
from dashboard.api.serializers.operations import OperationDetailSerializer
from dashboard.api.serializers.workers import (
    WorkerAddedSerializer,
    WorkerAddSerializer,
    WorkerDrainedSerializer,
    WorkerDrainSerializer,
    WorkerNoticedSerializer,
    WorkerNoticeSerializer,
    WorkerReasonSerializer,
)
from rescaler.runner import workers as worker_services


def _worker_row(name: str) -> dict[str, Any]:
    """The worker as ``GET workers`` shows it."""
    worker = worker_services.worker_get(name=name)
    (row,) = [w for w in worker_list(pipeline=worker.pipeline.name) if w["name"] == name]
    return row


class WorkerListView(APIView):
    """The workers with their status; ask the worker provider for one more."""

    permission_classes = [IsAuthenticated, CanRescale]
    parser_classes = [StrictJSONParser]

    @extend_schema(
        operation_id="workers_list",
        summary="List workers",
        parameters=[ClusterQuerySerializer],
        responses={200: WorkerInfoSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        query = ClusterQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = worker_list(pipeline=query.validated_data.get("pipeline") or None)
        return Response(WorkerInfoSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="workers_create",
        summary="Add a worker",
        description="Asks the worker provider (RESCALER_WORKER_PROVIDER) for one more worker; "
        "its executor joins by itself a few seconds later and appears in GET workers, active "
        "once bootstrapped. Needs the operations.rescale permission. 409 "
        "worker_provider_refused when there is no provider (local mode) or it failed.",
        request=WorkerAddSerializer,
        responses={
            202: OpenApiResponse(WorkerAddedSerializer, description="The provider's answer."),
            **error_responses(400, 401, 403, 409, 413, 415),
        },
    )
    def post(self, request: Request) -> Response:
        body = WorkerAddSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        added = worker_services.worker_add(user=request.user, cores=body.validated_data["cores"])
        return Response(
            WorkerAddedSerializer(added.to_json()).data, status=status.HTTP_202_ACCEPTED
        )


# the worker a path names; its example is the one a registered local cluster has, so that the
# schema's explicit examples (and the fuzzer, which sends them first) reach a real worker's
# cordon, uncordon and drain, not only the 404 of a random name
WORKER_NAME = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The worker's name, as GET /api/v1/workers lists it.",
    examples=[OpenApiExample("the local worker", value="local-0")],
)


class _WorkerStatusView(APIView):
    """An operator's change of one worker's status (cordon, uncordon): a reason in, the worker
    as it now is out."""

    permission_classes = [IsAuthenticated, CanRescale]
    parser_classes = [StrictJSONParser]
    change: Any = None  # the service: worker_cordon or worker_uncordon

    def post(self, request: Request, name: str) -> Response:
        body = WorkerReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        worker = type(self).change(
            user=request.user, name=path_text(name, "worker"), reason=body.validated_data["reason"]
        )
        return Response(WorkerInfoSerializer(_worker_row(worker.name)).data)


@extend_schema_view(
    post=extend_schema(
        operation_id="workers_cordon",
        parameters=[WORKER_NAME],
        description="Cordon a worker: no new vnodes go to it; it keeps what it has.",
        request=WorkerReasonSerializer,
        responses={
            200: OpenApiResponse(WorkerInfoSerializer, description="Cordoned (or already was)."),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
)
class WorkerCordonView(_WorkerStatusView):
    """Cordon a worker: no new vnodes go to it; it keeps what it has."""

    change = staticmethod(worker_services.worker_cordon)


@extend_schema_view(
    post=extend_schema(
        operation_id="workers_uncordon",
        parameters=[WORKER_NAME],
        description="Uncordon a worker: it takes vnodes again.",
        request=WorkerReasonSerializer,
        responses={
            200: OpenApiResponse(WorkerInfoSerializer, description="Active (or already was)."),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
)
class WorkerUncordonView(_WorkerStatusView):
    """Uncordon a worker: it takes vnodes again."""

    change = staticmethod(worker_services.worker_uncordon)


def _worker_and_operation(request: Request, worker: Any, operation: Any, **extra: Any) -> Response:
    """202 with the worker as it now is and the operation it started (None: none), whose URL
    is the Location header."""
    headers = {}
    detail = None
    if operation is not None:
        op = operation_get(operation_id=operation.operation_id)
        detail = OperationDetailSerializer(op).data
        headers["Location"] = api_reverse(
            "api:operation-detail", kwargs={"operation_id": op.operation_id}, request=request
        )
    data = {
        "worker": WorkerInfoSerializer(_worker_row(worker.name)).data,
        "operation": detail,
        **extra,
    }
    return Response(data, status=status.HTTP_202_ACCEPTED, headers=headers)


class WorkerNoticeView(APIView):
    """A preemption notice, from a platform hook: the worker is cordoned at once and, under
    RESCALER_PREEMPTION_POLICY=drain, drained with priority."""

    permission_classes = [IsAuthenticated, CanRescale]
    parser_classes = [StrictJSONParser]

    @extend_schema(
        operation_id="workers_notice",
        parameters=[WORKER_NAME],
        description="A worker will leave soon (a spot interruption, a Kubernetes eviction): "
        "cordoned at once and audited as self-reported, with its deadline; under "
        "RESCALER_PREEMPTION_POLICY=drain its drain starts all at once, after asking an "
        "operation already on its fragments to cancel. A second notice keeps the earlier "
        "deadline. 409 when the worker is already leaving or gone.",
        request=WorkerNoticeSerializer,
        responses={
            202: OpenApiResponse(WorkerNoticedSerializer, description="Noticed."),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        body = WorkerNoticeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        notice = worker_services.worker_notice(
            user=request.user,
            name=path_text(name, "worker"),
            deadline_s=body.validated_data.get("deadline_s"),
            reason=body.validated_data["reason"],
        )
        return _worker_and_operation(
            request,
            notice.worker,
            notice.operation,
            waiting_for=list(notice.waiting_for),
            detail=notice.detail,
        )


class WorkerDrainView(APIView):
    """Drain and remove a worker: one live operation moves every vnode off its PUs; when it
    completes the runner decommissions the worker and the provider releases it."""

    permission_classes = [IsAuthenticated, CanRescale]
    parser_classes = [StrictJSONParser]

    @extend_schema(
        operation_id="workers_drain",
        parameters=[WORKER_NAME],
        request=WorkerDrainSerializer,
        responses={
            202: OpenApiResponse(
                WorkerDrainedSerializer,
                description="Draining: the worker and its operation (the Location header is "
                "the operation's URL); or decommissioning at once, without an operation.",
            ),
            **error_responses(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        body = WorkerDrainSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        drain = worker_services.worker_drain(
            user=request.user,
            name=path_text(name, "worker"),
            reason=body.validated_data["reason"],
            granularity=body.validated_data.get("granularity"),
        )
        return _worker_and_operation(request, drain.worker, drain.operation)
