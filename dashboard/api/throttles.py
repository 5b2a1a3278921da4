"""Throttling of the API, registered once in ``REST_FRAMEWORK`` so no view has to opt in.

* ``MutationRateThrottle`` (``DEFAULT_THROTTLE_CLASSES``): per user, the unsafe requests (POST,
  PUT, PATCH, DELETE) within ``RESCALER_THROTTLE_MUTATIONS``. Reads are not counted: the
  dashboard and monitoring poll them, and they change nothing.
* ``ThrottledTokenAuthentication`` (``DEFAULT_AUTHENTICATION_CLASSES``): per client address,
  the failed token authentications within ``RESCALER_THROTTLE_BAD_TOKENS``. DRF authenticates
  before it runs any throttle, so a wrong token is refused with a 401 before a throttle class
  could count it; guessing tokens is only slowed down if authentication itself keeps count.

Both answer 429 with ``Retry-After`` and the API's error body ``{"code": "throttled", "detail"}``
(dashboard/api/errors.py). The rates are read from django.conf.settings on every request, not
from ``api_settings.DEFAULT_THROTTLE_RATES``: DRF copies that dict into the throttle class once
at import, so neither a changed setting nor ``override_settings`` would reach it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

if TYPE_CHECKING:
    # DRF's views import the authentication classes named in the settings: not at run time
    from rest_framework.views import APIView


class MutationRateThrottle(SimpleRateThrottle):
    """At most ``RESCALER_THROTTLE_MUTATIONS`` unsafe requests per user. Anonymous ones are
    refused by the permissions first, which DRF checks before throttles; should a view ever
    let them through, they count per client address."""

    scope = "mutations"

    def get_rate(self) -> str | None:
        rate: str | None = getattr(settings, "RESCALER_THROTTLE_MUTATIONS", None)
        return rate or None

    def allow_request(self, request: Request, view: APIView) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return super().allow_request(request, view)

    def get_cache_key(self, request: Request, view: APIView) -> str:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            ident = f"user:{user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class FailedTokenThrottle(SimpleRateThrottle):
    """Counts failed token authentications per client address (``RESCALER_THROTTLE_BAD_TOKENS``).

    Unlike a usual throttle it separates looking (``blocked``) from counting
    (``record_failure``): only failures count, and a client over the limit is refused before its
    token is even looked up, so a correct guess during the cool-down gains nothing."""

    scope = "bad_tokens"

    def get_rate(self) -> str | None:
        rate: str | None = getattr(settings, "RESCALER_THROTTLE_BAD_TOKENS", None)
        return rate or None

    def get_cache_key(self, request: Request, view: APIView | None) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def _limit(self) -> tuple[int, int] | None:
        """(failures allowed, window in seconds), or None when the throttle is off."""
        failures, window = self.parse_rate(self.get_rate())
        return None if failures is None or window is None else (failures, window)

    def blocked(self, request: Request) -> bool:
        """Whether this client has used up its failures; loads the history ``wait()`` needs."""
        limit = self._limit()
        if limit is None:
            return False
        self.key = self.get_cache_key(request, None)
        self.now = self.timer()
        self.history = [t for t in self.cache.get(self.key, []) if t > self.now - limit[1]]
        return len(self.history) >= limit[0]

    def record_failure(self, request: Request) -> None:
        limit = self._limit()
        if limit is None:
            return
        if not hasattr(self, "history"):
            self.blocked(request)
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, limit[1])


class ThrottledTokenAuthentication(TokenAuthentication):
    """DRF's token authentication that refuses a client with 429 once it has sent too many
    wrong tokens. Requests without a token are not affected (session users, anonymous)."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        throttle = FailedTokenThrottle()
        if throttle.blocked(request):
            raise exceptions.Throttled(wait=throttle.wait())
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure(request)
            raise
