"""Settings for a deployment (docker-compose.yml). Secrets have no defaults: a missing one stops
the process at start-up rather than running with a guessable value.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from .base import *
from .env import env_bool, env_choice, env_float, env_list, env_required

DEBUG = False
SECRET_KEY = env_required("SECRET_KEY")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the host(s) the site is served as.")

# --- TLS (docs/configuration.md, "Behind a TLS proxy"); `manage.py check --deploy` passes with
# the defaults.
# How HTTPS reaches Django: "proxy" (default) a proxy terminates TLS and sets X-Forwarded-Proto,
# which is then trusted; "direct" daphne itself serves TLS (no header is trusted); "off" plain
# HTTP (docker-compose.yml without a proxy): no redirect, HSTS or secure-only cookies.
RESCALER_TLS = env_choice("RESCALER_TLS", "proxy", ("proxy", "direct", "off"))
_tls = RESCALER_TLS != "off"
# Only behind a proxy: reachable directly, a client could claim HTTPS with the header itself.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if RESCALER_TLS == "proxy" else None
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _tls)
# Probes that talk plain HTTP to the container (the compose healthcheck, a Prometheus scraper on
# the internal network) must not be redirected to an HTTPS port daphne does not listen on.
SECURE_REDIRECT_EXEMPT = env_list("SECURE_REDIRECT_EXEMPT", [r"^healthz$", r"^metrics$"])
# HSTS (sent on HTTPS answers only): a year, subdomains and preload by default; lower or turn
# them off while trying TLS out, as browsers remember the header for that long.
SECURE_HSTS_SECONDS = int(env_float("SECURE_HSTS_SECONDS", 31_536_000 if _tls else 0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _tls)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", _tls)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", _tls)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True

# Hashed, compressed static files collected at image build time (Dockerfile).
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
