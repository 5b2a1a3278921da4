"""WSGI entry point (HTTP only; the deployment serves ASGI through daphne, see asgi.py)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.local")

application = get_wsgi_application()
