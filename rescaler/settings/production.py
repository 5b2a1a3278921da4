"""Settings for a deployment (docker-compose.yml). Secrets have no defaults: a missing one stops
the process at start-up rather than running with a guessable value.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from .base import *
from .env import env_bool, env_list, env_required

DEBUG = False
SECRET_KEY = env_required("SECRET_KEY")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the host(s) the site is served as.")

# TLS is terminated by a proxy in front of daphne; it says so with X-Forwarded-Proto.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True

# Hashed, compressed static files collected at image build time (Dockerfile).
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
