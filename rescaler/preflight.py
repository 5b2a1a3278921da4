"""Is each service the suite or the dev server needs reachable? If not, say how to start it.

``python -m rescaler.preflight postgres redis`` exits 1 with one line per missing service;
scripts/test and the root conftest.py use it so a missing service is named, never waited on.
No Django import: it runs before settings exist.
"""

from __future__ import annotations

import argparse
import os
import sys

import redis

from rescaler.dbsetup import (
    DEFAULT_DATABASE_URL,
    START_POSTGRES_HINT,
    DbState,
    is_postgres,
    postgres_state,
    redact,
)

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
START_REDIS_HINT = (
    "start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' "
    "--appendonly no (or `sudo service redis-server start`)"
)
TIMEOUT_S = 3.0


def postgres_problem(url: str | None = None) -> str | None:
    """None when the Postgres server of ``url`` answers (its database may still be missing)."""
    url = url or os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    if not is_postgres(url):
        return None
    state, message = postgres_state(url)
    if state is DbState.UNREACHABLE:
        return f"Postgres at {redact(url)} is not reachable ({message}); {START_POSTGRES_HINT}."
    return None


def redis_problem(url: str | None = None) -> str | None:
    url = url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    client = redis.Redis.from_url(url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"Redis at {redact(url)} is not reachable ({exc}); {START_REDIS_HINT}."
    finally:
        client.close()
    return None


CHECKS = {"postgres": postgres_problem, "redis": redis_problem}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check that services are reachable.")
    parser.add_argument("services", nargs="+", choices=sorted(CHECKS))
    args = parser.parse_args(argv)
    problems = [p for p in (CHECKS[name]() for name in args.services) if p]
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
