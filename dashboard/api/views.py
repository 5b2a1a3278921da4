"""The REST API's views: each validates its input, calls one service or selector, serializes.

Refusals are raised, never built here: ``dashboard.api.errors.exception_handler`` turns them into
``{"code", "detail"}`` with the right 4xx status.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse as api_reverse
from rest_framework.views import APIView

from dashboard.api.csv import (
    AUDIT_COLUMNS,
    OPERATION_COLUMNS,
    CSVListView,
    audit_rows,
    operation_rows,
)
from dashboard.api.errors import error_responses, not_found
from dashboard.api.filters import AuditFilter, OperationFilter
from dashboard.api.pagination import Pagination
from dashboard.api.parsers import StrictJSONParser
from dashboard.api.permissions import CanRescale
from dashboard.api.selectors.cluster import cluster_info, worker_list
from dashboard.api.selectors.keys import fragment_get, key_state
from dashboard.api.selectors.operations import audit_list, operation_get, operation_list
from dashboard.api.serializers.cluster import (
    ClusterQuerySerializer,
    ClusterSerializer,
    WorkerInfoSerializer,
)
from dashboard.api.serializers.keys import KeyQuerySerializer, KeyStateSerializer
from dashboard.api.serializers.operation_request import OperationRequestSerializer
from dashboard.api.serializers.operations import (
    AuditEventSerializer,
    OperationDetailSerializer,
    OperationSerializer,
)
from dashboard.api.serializers.plans import DryRunSerializer
from dashboard.api.serializers.workers import (
    WorkerAddedSerializer,
    WorkerAddSerializer,
    WorkerDrainedSerializer,
    WorkerDrainSerializer,
    WorkerNoticedSerializer,
    WorkerNoticeSerializer,
    WorkerReasonSerializer,
)
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.runner import workers as worker_services


def _path_text(value: str, what: str) -> str:
    """A path segment as text Postgres can compare (it refuses NUL characters)."""
    if "\x00" in value:
        raise not_found(f"unknown_{what}", f"no {what} with a NUL character in its name")
    return value


@extend_schema(exclude=True)
@api_view(["GET"])
def api_root(request: Request, format: str | None = None) -> Response:
    """The endpoints of the API (see /api/docs/ for the schema)."""
    return Response(
        {
            "cluster": api_reverse("api:cluster", request=request, format=format),
            "workers": api_reverse("api:workers", request=request, format=format),
            "operations": api_reverse("api:operations", request=request, format=format),
            "audit": api_reverse("api:audit", request=request, format=format),
            "schema": request.build_absolute_uri(reverse("schema")),
            "docs": request.build_absolute_uri(reverse("swagger-ui")),
        }
    )


class ClusterView(APIView):
    """Workers, PUs, fragments, mappings and load (DESIGN §2, GetClusterInfo)."""

    @extend_schema(
        operation_id="cluster_retrieve",
        parameters=[ClusterQuerySerializer],
        responses={200: ClusterSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        query = ClusterQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        info = cluster_info(pipeline=query.validated_data.get("pipeline") or None)
        # ``cluster_info`` answers the schema's shape and types already (ClusterSerializer
        # documents it; tests/unit/api/test_cluster.py holds the two byte for byte equal):
        # serializing 1,024 PUs and 32,768 vnodes field by field through DRF was half the
        # request's time, rendering the same dicts is a few ms
        return Response(info)


REQUEST_EXAMPLES = [
    OpenApiExample(
        "scale out, dry run",
        value={
            "changes": {"word_count": {"added_parallel_units": [2, 3]}},
            "strategy": "live",
            "granularity": "fluid",
            "dry_run": True,
        },
        request_only=True,
    ),
    OpenApiExample(
        "migrate, batched",
        value={
            "changes": {"word_count": {"added_parallel_units": [2], "removed_parallel_units": [0]}},
            "granularity": {"vnodes_per_step": 4, "steps_in_flight": 2},
            "weighted": True,
        },
        request_only=True,
    ),
    OpenApiExample(
        "start the plan a dry run answered",
        value={
            "changes": {"word_count": {"added_parallel_units": [2, 3]}},
            "strategy": "live",
            "granularity": "fluid",
            "plan_id": "5f0c4a1e9b7d4c2a8e6f1b3d5a7c9e0f",
        },
        request_only=True,
    ),
]


class OperationListView(CSVListView):
    """Rescale operations: list them (``?format=csv``: all of them), or request one (a dry run
    only plans)."""

    permission_classes = [IsAuthenticated, CanRescale]
    parser_classes = [StrictJSONParser]
    serializer_class = OperationSerializer
    filterset_class = OperationFilter
    pagination_class = Pagination
    csv_filename = "operations.csv"
    csv_columns = OPERATION_COLUMNS

    def get_queryset(self) -> Any:
        return operation_list()

    def csv_rows(self, queryset: Any) -> Any:
        return operation_rows(queryset)

    @extend_schema(
        operation_id="operations_list",
        summary="List rescale operations",
        description="Newest first, paginated, without plans (GET operations/{operation_id} has "
        "them). With ?format=csv (or Accept: text/csv): every matching operation as CSV.",
        responses={
            (200, "application/json"): OperationSerializer(many=True),
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="With ?format=csv (or Accept: text/csv): every matching operation, "
                f"unpaginated, columns {', '.join(OPERATION_COLUMNS)} (fragments as JSON).",
            ),
            **error_responses(400, 401, 404, 406, media_type="application/json"),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="operations_create",
        summary="Request a rescale (or plan one with dry_run)",
        description="Scale out, scale in or migrate PUs of one or more stateful fragments. "
        "Everything is checked before anything moves. Needs the operations.rescale "
        "permission. A dry run answers 200 with the plan and its plan_id; otherwise 202 with "
        "the operation. With plan_id (and the dry run's body, without dry_run) the operation "
        "is exactly that plan: 409 plan_stale, with what changed, when it expired, was used "
        "already, the body differs or a fragment's mapping moved since; 400 unknown_plan for "
        "a plan_id that is not one of the user's plans.",
        request=OperationRequestSerializer,
        examples=REQUEST_EXAMPLES,
        responses={
            200: OpenApiResponse(
                DryRunSerializer, description="A dry run: the plan, and its plan_id."
            ),
            202: OpenApiResponse(
                OperationDetailSerializer,
                description="Accepted: the operation, queued for the orchestrator. The Location "
                "header is its URL.",
            ),
            **error_responses(400, 401, 403, 404, 409, 413, 415, media_type="application/json"),
        },
    )
    def post(self, request: Request) -> Response:
        body = OperationRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = operation_request(
            user=request.user,
            body=body.validated_data["request"],
            plan_id=body.validated_data["plan_id"],
        )
        if not isinstance(result, RescaleOperation):
            return Response(DryRunSerializer(result).data, status=status.HTTP_200_OK)
        op = operation_get(operation_id=result.operation_id)
        location = api_reverse(
            "api:operation-detail", kwargs={"operation_id": op.operation_id}, request=request
        )
        return Response(
            OperationDetailSerializer(op).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": location},
        )


class OperationDetailView(APIView):
    """One operation: plan, steps, per-vnode phases, counters and its audit events."""

    @extend_schema(
        operation_id="operations_retrieve",
        responses={200: OperationDetailSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, operation_id: str) -> Response:
        op = operation_get(operation_id=_path_text(operation_id, "operation"))
        return Response(OperationDetailSerializer(op).data)


class OperationCancelView(APIView):
    """Cancel an operation: steps being acquired finish, held steps go back to their source, no
    new step starts (docs/rescale.md)."""

    permission_classes = [IsAuthenticated, CanRescale]

    @extend_schema(
        operation_id="operations_cancel",
        request=None,
        responses={
            202: OpenApiResponse(
                OperationDetailSerializer, description="Cancelling (or already cancelling)."
            ),
            **error_responses(401, 403, 404, 409),
        },
    )
    def post(self, request: Request, operation_id: str) -> Response:
        op = operation_get(operation_id=_path_text(operation_id, "operation"))
        operation_cancel(user=request.user, operation=op)
        return Response(
            OperationDetailSerializer(operation_get(operation_id=op.operation_id)).data,
            status=status.HTTP_202_ACCEPTED,
        )


class FragmentKeyView(APIView):
    """One key of a stateful fragment: vnode, owner PU, migration phase and current state."""

    @extend_schema(
        operation_id="fragments_keys_retrieve",
        parameters=[
            KeyQuerySerializer,
            OpenApiParameter("fragment", OpenApiTypes.STR, OpenApiParameter.PATH),
            OpenApiParameter("key", OpenApiTypes.STR, OpenApiParameter.PATH),
        ],
        responses={200: KeyStateSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, fragment: str, key: str) -> Response:
        query = KeyQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        frag = fragment_get(
            name=_path_text(fragment, "fragment"),
            pipeline=query.validated_data.get("pipeline") or None,
        )
        return Response(KeyStateSerializer(key_state(fragment=frag, key=key)).data)


class AuditListView(CSVListView):
    """The audit log, newest first; ``?format=csv`` streams every matching event as CSV."""

    serializer_class = AuditEventSerializer
    filterset_class = AuditFilter
    pagination_class = Pagination
    csv_filename = "audit.csv"
    csv_columns = AUDIT_COLUMNS

    def get_queryset(self) -> Any:
        return audit_list()

    def csv_rows(self, queryset: Any) -> Any:
        return audit_rows(queryset)

    @extend_schema(
        operation_id="audit_list",
        responses={
            (200, "application/json"): AuditEventSerializer(many=True),
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="With ?format=csv (or Accept: text/csv): every matching event, "
                f"unpaginated, columns {', '.join(AUDIT_COLUMNS)} (before and after as JSON).",
            ),
            **error_responses(400, 401, 404, 406, media_type="application/json"),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        return super().get(request, *args, **kwargs)


# -- elastic workers (docs/elastic-workers.md) ---------------------------------------------------
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
            user=request.user, name=_path_text(name, "worker"), reason=body.validated_data["reason"]
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
            name=_path_text(name, "worker"),
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
            name=_path_text(name, "worker"),
            reason=body.validated_data["reason"],
            granularity=body.validated_data.get("granularity"),
        )
        return _worker_and_operation(request, drain.worker, drain.operation)
