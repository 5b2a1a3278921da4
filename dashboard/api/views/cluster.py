"""``GET /api/v1/cluster``: workers, PUs, fragments, mappings and load; with ``as_of``, or
``fragment`` and ``version``, the placement of the past."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.api.errors import error_responses
from dashboard.api.selectors.cluster import cluster_info
from dashboard.api.selectors.placements import past_placement, placement_document
from dashboard.api.serializers.cluster import (
    ClusterPlacementSerializer,
    ClusterQuerySerializer,
    ClusterSerializer,
)

CLUSTER_OR_PLACEMENT = PolymorphicProxySerializer(
    component_name="ClusterOrPlacement",
    serializers=[ClusterSerializer, ClusterPlacementSerializer],
    resource_type_field_name=None,
)


class ClusterView(APIView):
    """Workers, PUs, fragments, mappings and load (DESIGN §2, GetClusterInfo). With ``as_of``,
    or ``fragment`` and ``version``: each stateful fragment's placement then (docs/api.md,
    "The placement at any time")."""

    @extend_schema(
        operation_id="cluster_retrieve",
        parameters=[ClusterQuerySerializer],
        responses={
            200: OpenApiResponse(
                response=CLUSTER_OR_PLACEMENT,
                description="The cluster now (Cluster); with as_of, or fragment and version, "
                "the placement of the past (ClusterPlacement).",
            ),
            **error_responses(400, 401, 404),
        },
    )
    def get(self, request: Request) -> Response:
        query = ClusterQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        pipeline = asked.get("pipeline") or None
        if "as_of" in asked or "version" in asked:
            placement = past_placement(
                as_of=asked.get("as_of"),
                fragment=asked.get("fragment"),
                version=asked.get("version"),
                pipeline=pipeline,
            )
            return Response(ClusterPlacementSerializer(placement_document(placement)).data)
        info = cluster_info(pipeline=pipeline)
        # ``cluster_info`` answers the schema's shape and types already (ClusterSerializer
        # documents it; tests/unit/api/test_cluster.py holds the two byte for byte equal):
        # serializing 1,024 PUs and 32,768 vnodes field by field through DRF was half the
        # request's time, rendering the same dicts is a few ms
        return Response(info)
