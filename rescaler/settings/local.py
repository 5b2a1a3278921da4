"""Settings for a developer's machine (scripts/dev, manage.py by default)."""

from __future__ import annotations

import os
import sys

from rescaler.dbsetup import choose_local_database

from .base import *
from .env import database_config, env_bool, env_list, env_str

DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY", "django-insecure-local-development-only")
# Any host: a developer may open the dashboard by the machine's address, not only localhost.
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["*"])
# A developer's machine: the API docs open without signing in, and /healthz shows every
# component's errors to scripts/dev, which polls it anonymously and prints what to fix.
RESCALER_PUBLIC_API_DOCS = env_bool("RESCALER_PUBLIC_API_DOCS", True)
RESCALER_PUBLIC_HEALTH_DETAILS = env_bool("RESCALER_PUBLIC_HEALTH_DETAILS", True)

# Postgres when it answers (the database is created if missing), else SQLite under var/ with a
# warning. scripts/dev makes this choice once and passes DATABASE_URL to every process it starts,
# so daphne, the Celery worker and the runner always share one database.
_database = choose_local_database(os.environ.get("DATABASE_URL") or None)
if _database.warning:
    print(f"WARNING: {_database.warning}", file=sys.stderr)
DATABASE_URL = _database.url
DATABASES = {"default": database_config(DATABASE_URL)}
