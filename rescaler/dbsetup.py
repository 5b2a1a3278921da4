"""Make sure the configured database exists, or pick the SQLite fallback for local work.

Used by ``rescaler.settings.local`` and by ``scripts/dev`` (``python -m rescaler.dbsetup`` prints
the database URL to use). Imports no Django, so it can run before settings exist. Every connection
attempt has a 3 s timeout: a missing or firewalled Postgres is reported, never waited on.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/rescaler"
SQLITE_PATH = Path(__file__).resolve().parent.parent / "var" / "rescaler.sqlite3"
CONNECT_TIMEOUT_S = 3
START_POSTGRES_HINT = (
    "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start "
    "(Debian), or `sudo service postgresql start`"
)
POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql"}


class DbState(Enum):
    READY = "ready"
    MISSING = "missing"  # the server answers but the database does not exist
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class DatabaseChoice:
    url: str
    created: bool = False
    warning: str | None = None


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def is_postgres(url: str) -> bool:
    return urlsplit(url).scheme in POSTGRES_SCHEMES


def _libpq_url(url: str, dbname: str | None = None) -> str:
    parts = urlsplit(url)
    path = f"/{dbname}" if dbname is not None else parts.path
    # libpq knows postgres:// and postgresql:// only.
    return urlunsplit(("postgresql", parts.netloc, path, parts.query, parts.fragment))


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def postgres_state(url: str) -> tuple[DbState, str]:
    """Whether the database of ``url`` answers, with the server's message when it does not."""
    try:
        with psycopg.connect(_libpq_url(url), connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        message = " ".join(str(exc).split())  # libpq messages span lines
        # libpq reports a missing database as a connection error with no SQLSTATE; its text
        # is stable across server versions.
        if "does not exist" in message and "database" in message:
            return DbState.MISSING, message
        return DbState.UNREACHABLE, message
    return DbState.READY, ""


def create_database(url: str) -> bool:
    """CREATE DATABASE for ``url`` through the server's ``postgres`` database.

    Returns False when another process created it first (two scripts starting together).
    """
    name = database_name(url)
    with psycopg.connect(
        _libpq_url(url, dbname="postgres"), connect_timeout=CONNECT_TIMEOUT_S, autocommit=True
    ) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            return False
    logger.info("Created database %s", name)
    return True


def ensure_database(url: str) -> DbState:
    """Create the Postgres database of ``url`` if the server answers and it is missing."""
    state, _ = postgres_state(url)
    if state is DbState.MISSING:
        create_database(url)
        return DbState.READY
    return state


def choose_local_database(
    explicit_url: str | None,
    default_url: str = DEFAULT_DATABASE_URL,
    sqlite_path: Path = SQLITE_PATH,
) -> DatabaseChoice:
    """The database for local development.

    - ``DATABASE_URL`` set: use it; create the Postgres database if missing; never fall back
      (the person asked for that database; if it is down, Django's error will say so).
    - unset: the default local Postgres, created if missing; if it does not answer, SQLite under
      ``var/`` with a warning saying how to start Postgres.
    """
    url = explicit_url or default_url
    if not is_postgres(url):
        return DatabaseChoice(url=url)
    state, message = postgres_state(url)
    if state is DbState.MISSING:
        created = create_database(url)
        return DatabaseChoice(url=url, created=created)
    if state is DbState.READY:
        return DatabaseChoice(url=url)
    if explicit_url:
        return DatabaseChoice(
            url=url,
            warning=f"Postgres at {redact(url)} is not reachable ({message}); {START_POSTGRES_HINT}.",
        )
    sqlite_path.parent.mkdir(parents=True, exist_ok=True)
    return DatabaseChoice(
        url=f"sqlite:///{sqlite_path}",
        warning=(
            f"Postgres at {redact(url)} is not reachable, so this run uses SQLite at {sqlite_path} "
            f"(fine for a look around; tests and production need Postgres). To use Postgres, "
            f"{START_POSTGRES_HINT}, then run scripts/dev again."
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m rescaler.dbsetup``: print the database URL for local work (scripts/dev).

    Reads DATABASE_URL like the local settings do; warnings go to stderr, the URL to stdout.
    """
    parser = argparse.ArgumentParser(description="Print the database URL for local work.")
    parser.parse_args(argv)
    choice = choose_local_database(os.environ.get("DATABASE_URL") or None)
    if choice.warning:
        print(f"WARNING: {choice.warning}", file=sys.stderr)
    if choice.created:
        print(f"Created database {database_name(choice.url)}.", file=sys.stderr)
    print(choice.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
