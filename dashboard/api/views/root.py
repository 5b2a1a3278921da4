"""``GET /api/v1/``: the index of the API's endpoints."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse as api_reverse


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
