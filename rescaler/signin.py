"""Sign-in throttling with django-axes: the pieces the settings point at.

django-axes counts failed sign-ins (the dashboard's ``/accounts/login/`` and the admin's login
both go through ``django.contrib.auth.authenticate``) and locks the client out for a cool-off
once ``AXES_FAILURE_LIMIT`` is reached (docs/configuration.md). Three adjustments live here:

* the client's address is read the way DRF's throttles read it, so one setting
  (``RESCALER_TRUSTED_PROXIES``) decides for both whether ``X-Forwarded-For`` is believed;
* ``authenticate()`` called without a request (the test client's ``login()``, a shell, a
  management command) is not attributable to a client, so it is not counted rather than refused;
* a lockout answers the sign-in page itself with a message and a 429, not axes' bare text.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_cool_off
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

LOCKOUT_STATUS = 429


class RequestAxesBackend(AxesStandaloneBackend):
    """axes' guard, skipped when there is no request to attribute the attempt to.

    Every sign-in that comes over HTTP (LoginView, the admin, DRF's BasicAuthentication) passes
    its request; only code running on the server calls ``authenticate()`` without one, and
    axes would raise there instead of letting the next backend answer."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        super().authenticate(request, username=username, password=password, **kwargs)
        return None


def client_ip(request: HttpRequest | Request) -> str | None:
    """The client's address as DRF's throttles see it (``NUM_PROXIES``): ``REMOTE_ADDR``, or the
    address the trusted proxies put in ``X-Forwarded-For``. A header nobody vouches for would
    let a client pick a fresh address for every guess. None for a request that came from no
    client (``force_login``, a request built on the server), which axes stores as unknown.
    DRF's BasicAuthentication hands axes a DRF request, a form a Django one: both work."""
    drf_request = request if isinstance(request, Request) else Request(request)
    ident = BaseThrottle().get_ident(drf_request)
    return str(ident) if ident else None


def _cool_off_minutes(request: HttpRequest) -> int | None:
    cool_off: timedelta | None = get_cool_off(request)
    if cool_off is None:
        return None
    return max(1, round(cool_off.total_seconds() / 60))


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: the sign-in page saying why signing in is refused and for how
    long, with 429 Too Many Requests (the admin's login gets the same page)."""
    return render(
        request,
        "registration/login.html",
        {
            "form": AuthenticationForm(request),
            "locked_out": True,
            "cooloff_minutes": _cool_off_minutes(request),
            "next": request.POST.get("next", "") if request.method == "POST" else "",
        },
        status=LOCKOUT_STATUS,
    )
