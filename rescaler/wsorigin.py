"""The websocket Origin check: a page may open a socket only to the host that served it.

Channels' ``AllowedHostsOriginValidator`` accepts any Origin when ``ALLOWED_HOSTS`` is ``*`` (the
local settings), so another site's page could open a socket with a signed-in user's session
cookie. Here the Origin must name the very host the browser connected to (its ``Host`` header),
or be listed in ``CSRF_TRUSTED_ORIGINS`` (a TLS proxy that rewrites the host), whatever
``ALLOWED_HOSTS`` says; without a ``Host`` header the Origin's host must be one of
``ALLOWED_HOSTS`` other than ``*``. A socket without Origin (not a browser) is refused too.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import validate_host


def origin_allowed(origin: str, host: str | None) -> bool:
    """Whether a socket opened by a page of ``origin`` to ``host`` may go on."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    if origin.rstrip("/") in {o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS}:
        return True
    if host:
        return parts.netloc.lower() == host.lower()
    allowed = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    return bool(parts.hostname) and validate_host(parts.hostname or "", allowed)


class SameOriginValidator:
    """ASGI middleware: refuses (HTTP 403) a websocket whose Origin is not its own host's."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin", b"").decode("latin1")
        host = headers.get(b"host", b"").decode("latin1") or None
        if scope["type"] == "websocket" and not (origin and origin_allowed(origin, host)):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
