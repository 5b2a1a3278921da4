"""``GET /api/v1/fragments/<fragment>/keys/<key>``: one key of a stateful fragment."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.api.errors import error_responses, path_text
from dashboard.api.selectors.keys import fragment_get, key_state
from dashboard.api.serializers.keys import KeyQuerySerializer, KeyStateSerializer


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
            name=path_text(fragment, "fragment"),
            pipeline=query.validated_data.get("pipeline") or None,
        )
        return Response(KeyStateSerializer(key_state(fragment=frag, key=key)).data)
