"""``/api/v1/operations``: list rescale operations, request one (or plan it with a dry run), read
one, cancel one; and ``/api/v1/audit``, the audit log."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import status
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
from dashboard.api.errors import error_responses, path_text
from dashboard.api.filters import AuditFilter, OperationFilter
from dashboard.api.pagination import Pagination
from dashboard.api.parsers import StrictJSONParser
from dashboard.api.permissions import CanRescale
from dashboard.api.selectors.operations import audit_list, operation_get, operation_list
from dashboard.api.serializers.operation_request import OperationRequestSerializer
from dashboard.api.serializers.operations import (
    AuditEventSerializer,
    OperationDetailSerializer,
    OperationSerializer,
)
from dashboard.api.serializers.plans import DryRunSerializer
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request

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
        op = operation_get(operation_id=path_text(operation_id, "operation"))
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
        op = operation_get(operation_id=path_text(operation_id, "operation"))
        operation_cancel(user=request.user, operation=op)
        return Response(
            OperationDetailSerializer(operation_get(operation_id=op.operation_id)).data,
            status=status.HTTP_202_ACCEPTED,
        )


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
