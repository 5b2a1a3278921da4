"""The site's own views, mounted by ``rescaler/urls.py`` outside the console's URLs:
``/healthz``, ``/favicon.ico``, and the error handlers (JSON under ``/api/``, Django's pages
elsewhere); and the components' health as the cluster page shows it too."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from rescaler.health import down_components, public_components, system_health


def health_body() -> tuple[bool, dict[str, Any]]:
    ok, components = system_health()
    down = down_components(components)
    return ok, {"status": "ok" if ok else "down", "down": down, "components": components}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every component is up, else 503 with the names of those down in ``down``.

    Public on purpose: load balancers, compose healthchecks and scripts/dev poll it unauthenticated.
    But the details name internal hosts, databases and workers: a caller who is not signed in
    gets only the statuses, unless ``RESCALER_PUBLIC_HEALTH_DETAILS`` says otherwise.
    """
    ok, body = health_body()
    if not (request.user.is_authenticated or settings.RESCALER_PUBLIC_HEALTH_DETAILS):
        body["components"] = public_components(body["components"])
        body["details"] = "sign in to see each component's details and errors"
    return JsonResponse(body, status=200 if ok else 503)


def _display(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)


def component_rows(components: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
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


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers ask for on pages that name no icon (the admin, the API
    docs): the console's icon, where the static files serve it (a temporary redirect: its
    hashed name changes with each release)."""
    response = redirect(static("dashboard/favicon.svg"))
    response["Cache-Control"] = "public, max-age=86400"
    return response


# -- errors outside any view: JSON under /api/, Django's pages elsewhere ------------------------
def _api_error(request: HttpRequest, status: int, code: str, detail: str) -> HttpResponse | None:
    if not request.path.startswith("/api/"):
        return None
    return JsonResponse({"code": code, "detail": detail}, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400 raised before a view (a body over DATA_UPLOAD_MAX_MEMORY_SIZE, a bad host)."""
    from django.views import defaults

    detail = str(exception) if exception else "the request could not be read"
    return _api_error(request, 400, "bad_request", detail) or defaults.bad_request(
        request, exception or Exception()
    )


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    from django.views import defaults

    return _api_error(
        request, 403, "permission_denied", "you may not do this"
    ) or defaults.permission_denied(request, exception or Exception())


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for a path no URL matches (an unknown endpoint, a key with a line break)."""
    from django.views import defaults

    return _api_error(
        request, 404, "not_found", f"no API endpoint at {request.path!r}; see /api/v1/"
    ) or defaults.page_not_found(request, exception or Exception())


def api_not_found(request: HttpRequest, unmatched: str = "") -> HttpResponse:
    """Any path under /api/ that no endpoint matches (the last URL pattern there): the JSON 404
    of :func:`page_not_found`, with ``DEBUG`` on too, where Django would answer its HTML debug
    page instead of calling ``handler404``. A path that only lacks its trailing slash is
    redirected to it, as ``APPEND_SLASH`` would have."""
    from django.http import HttpResponsePermanentRedirect
    from django.urls import Resolver404, resolve

    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(
                request.path + "/" + (f"?{query}" if query else "")
            )
    return page_not_found(request)


def server_error(request: HttpRequest) -> HttpResponse:
    from django.views import defaults

    return _api_error(
        request, 500, "server_error", "the server failed; the error is logged"
    ) or defaults.server_error(request)
