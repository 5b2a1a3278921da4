"""Settings for pytest (pytest-django creates and drops ``test_<name>`` on the real Postgres)."""

from __future__ import annotations

import os

from .base import *
from .env import env_str, redis_url_with_db

SECRET_KEY = "test-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

# The suite's API and health tests read the docs and /healthz anonymously; the tests of the
# production behaviour (tests/unit/test_hardening.py) turn these off with override_settings.
RESCALER_PUBLIC_API_DOCS = True
RESCALER_PUBLIC_HEALTH_DETAILS = True
# Every test client is 127.0.0.1 and the local-memory cache lives for the whole session, so
# real rates would let one test's requests throttle the next; throttle tests set a low rate.
RESCALER_THROTTLE_MUTATIONS = None
RESCALER_THROTTLE_BAD_TOKENS = None

# Hashing strength is not under test; MD5 makes each login in a test microseconds, not 0.3 s.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Tests use their own Redis database (1 unless TEST_REDIS_URL says otherwise), so a running
# scripts/dev (database 0) neither consumes test tasks nor sees test websocket events; under
# pytest-xdist, worker gwN uses database 1 + N, so that no test sees another's websocket events
# (pytest-django gives each worker its own test database the same way). The processes a test
# starts are given its TEST_REDIS_URL.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
REDIS_URL = env_str("TEST_REDIS_URL", redis_url_with_db(REDIS_URL, 1 + int(_XDIST_WORKER[2:])))
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_ALWAYS_EAGER = False  # tests that want eager execution override it
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    },
}

# Serve static files from the finders: tests never run collectstatic.
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True
