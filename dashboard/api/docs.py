"""Who may read the API's schema and documentation pages (``/api/schema/``, ``/api/docs/``,
``/api/redoc/``).

The schema lists every endpoint, parameter and error code: a map worth having for an attacker,
so in production it is for signed-in users only. ``RESCALER_PUBLIC_API_DOCS`` opens it to
anyone (the default on a developer's machine and in the tests). The setting is read on each
request, not when the URLs are loaded, so it can be changed per deployment and per test.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

if TYPE_CHECKING:
    # annotations only: DRF's views module imports back through the settings
    from rest_framework.views import APIView


def docs_are_public() -> bool:
    return bool(getattr(settings, "RESCALER_PUBLIC_API_DOCS", False))


class ApiDocsPermission(BasePermission):
    """The schema (``/api/schema/``): anyone when the docs are public, else a token or session
    user; anonymous callers get the API's usual 401 ``not_authenticated``."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if docs_are_public():
            return True
        user = getattr(request, "user", None)
        return bool(user is not None and user.is_authenticated)


def docs_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The HTML pages (Swagger UI, ReDoc) are opened in a browser: send a signed-out visitor to
    the sign-in page and back, rather than answering a bare 401."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not docs_are_public() and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return view(request, *args, **kwargs)

    return wrapper
