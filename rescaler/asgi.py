"""ASGI entry point: HTTP to Django, websockets to the dashboard's consumers.

``daphne rescaler.asgi:application``.
"""

from __future__ import annotations

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.local")

# Set Django up before importing consumers: they import models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter

from dashboard.routing import websocket_urlpatterns
from rescaler.wsorigin import SameOriginValidator

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The origin check stops another site's page from opening a websocket with the user's
        # session cookie (rescaler/wsorigin.py); the auth stack puts that user in the scope
        # for the consumer to check.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# What is alive now (Django, the apps, their modules) lives as long as the process: frozen (the
# garbage collected first), a full collection no longer walks it. In bench/control_plane.py's
# process a full collection cost the GET /api/v1/cluster that met it ~150 ms, ~25 ms frozen:
# those collections were its p99.
gc.collect()
gc.freeze()
