"""Typed readers of environment variables, shared by the settings modules.

Kept free of Django imports so they can be unit-tested and used before settings exist.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_required(name: str) -> str:
    """A variable with no default: its absence must stop the process at start-up."""
    value = os.environ.get(name, "")
    if not value:
        raise ImproperlyConfigured(f"The environment variable {name} must be set.")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false).")


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks are dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


# A DRF throttle rate: requests per second, minute, hour or day ("30/minute", "5/s").
_RATE = re.compile(r"^\d+/(s|sec|second|m|min|minute|h|hour|d|day)$")


def env_rate(name: str, default: str | None) -> str | None:
    """A throttle rate such as ``30/minute``; empty or ``off`` turns the throttle off (None).

    Checked here, at start-up: DRF would only reject a malformed rate on the first request."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("", "off", "none", "0"):
        return None
    if not _RATE.match(value):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a rate: write requests/period, e.g. 30/minute, or off."
        )
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of words; anything else stops the process at start-up."""
    value = os.environ.get(name, default).strip().lower() or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}.")
    return value


_LOCKOUT_PARAMETERS = ("username", "ip_address", "user_agent")


def env_lockout_parameters(name: str, default: str) -> list[str | list[str]]:
    """django-axes' ``AXES_LOCKOUT_PARAMETERS`` from ``a,b+c``: commas separate what is locked
    out independently, ``+`` joins parameters locked out together (``username+ip_address``
    locks one user name from one client, not the user everywhere nor the client for everyone)."""
    raw = os.environ.get(name, default).strip() or default
    result: list[str | list[str]] = []
    for group in raw.split(","):
        parts = [part.strip() for part in group.split("+") if part.strip()]
        unknown = [part for part in parts if part not in _LOCKOUT_PARAMETERS]
        if not parts or unknown:
            raise ImproperlyConfigured(
                f"{name}={raw!r}: use {', '.join(_LOCKOUT_PARAMETERS)}, joined by + or ,"
            )
        result.append(parts[0] if len(parts) == 1 else parts)
    return result


def database_config(url: str) -> dict[str, Any]:
    """DATABASES["default"] for a database URL (postgres:// or sqlite://)."""
    # CONN_MAX_AGE=0: under ASGI each request runs in a worker thread, and persistent connections
    # held by those threads pile up until Postgres refuses new ones (Django's ASGI docs).
    config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    engine = config["ENGINE"]
    if engine == "django.db.backends.postgresql":
        # A database that does not answer must fail within seconds, never hang a request or a
        # script; but a busy host (CI running Spark beside Postgres) may take a few to accept.
        timeout = int(os.environ.get("DATABASE_CONNECT_TIMEOUT", "10"))
        config.setdefault("OPTIONS", {})["connect_timeout"] = timeout
    elif engine == "django.db.backends.sqlite3":
        # The SQLite fallback is shared by daphne, the Celery worker and the runner: WAL lets
        # readers go on during a write, IMMEDIATE takes the write lock up front (no deadlocking
        # upgrades), and the timeout waits for the lock instead of failing at once.
        config["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    return config


def redis_url_with_db(url: str, db: int) -> str:
    """The same Redis server with another logical database, e.g. to keep tests apart."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))
