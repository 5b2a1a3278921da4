"""HTTP views of the dashboard: thin, each calls a service and renders its result."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from dashboard.api.selectors import cluster_info, operation_list
from dashboard.console import METRICS, cluster_matrix
from rescaler.health import down_components, system_health
from rescaler.operations.models import RescaleOperation


def _health_body() -> tuple[bool, dict[str, Any]]:
    ok, components = system_health()
    down = down_components(components)
    return ok, {"status": "ok" if ok else "down", "down": down, "components": components}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every component is up, else 503 with the names of those down in ``down``.

    Public on purpose: load balancers, compose healthchecks and scripts/dev poll it unauthenticated.
    """
    ok, body = _health_body()
    return JsonResponse(body, status=200 if ok else 503)


def _display(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)


def _component_rows(components: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "status": component["status"],
            "details": [
                (key, _display(value))
                for key, value in component.items()
                if key not in ("status", "error")
            ],
            "error": component.get("error"),
        }
        for name, component in components.items()
    ]


def _matrix_context() -> dict[str, Any]:
    cluster = cluster_info()
    return {"matrix": cluster_matrix(cluster), "metrics": METRICS, "cluster": cluster}


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The cluster page: component health, the fragment × PU matrix and running operations.
    The last-epoch ticker and the matrix update live over ws/cluster/."""
    ok, body = _health_body()
    last_epoch = body["components"]["runner"].get("last_epoch")
    running = operation_list().exclude(status__in=RescaleOperation.FINAL)[:20]
    return render(
        request,
        "dashboard/cluster.html",
        {
            **_matrix_context(),
            "health": body,
            "all_up": ok,
            "components": _component_rows(body["components"]),
            # The runner reports -1 until its first epoch commits.
            "last_epoch": last_epoch if isinstance(last_epoch, int) and last_epoch >= 0 else None,
            "running": running,
        },
    )


@never_cache
@login_required
@require_GET
def matrix_partial(request: HttpRequest) -> HttpResponse:
    """The matrix alone, re-fetched by the page when the cluster changes."""
    return render(request, "dashboard/partials/matrix.html", _matrix_context())
