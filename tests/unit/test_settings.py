"""Settings from the environment: the readers, the database choice, and each settings module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured

from rescaler import dbsetup
from rescaler.settings.env import (
    database_config,
    env_bool,
    env_float,
    env_list,
    env_required,
    redis_url_with_db,
)

REPO = Path(__file__).resolve().parents[2]
UNREACHABLE_PG = "postgres://postgres@127.0.0.1:1/rescaler"  # nothing listens on port 1


# --- readers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"), [("1", True), ("true", True), ("On", True), ("0", False), ("no", False)]
)
def test_env_bool_parses_common_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("FLAG", raw)
    assert env_bool("FLAG", not expected) is expected


def test_env_bool_rejects_nonsense_and_defaults_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLAG", raising=False)
    assert env_bool("FLAG", True) is True
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="FLAG"):
        env_bool("FLAG", True)


def test_env_list_splits_on_commas_and_drops_blanks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTS", " a.example, b.example ,,")
    assert env_list("HOSTS", ["x"]) == ["a.example", "b.example"]
    monkeypatch.delenv("HOSTS")
    assert env_list("HOSTS", ["x"]) == ["x"]


def test_env_float_and_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STALE", "12.5")
    assert env_float("STALE", 30) == 12.5
    monkeypatch.setenv("STALE", "soon")
    with pytest.raises(ImproperlyConfigured):
        env_float("STALE", 30)
    monkeypatch.delenv("NEEDED", raising=False)
    with pytest.raises(ImproperlyConfigured, match="NEEDED"):
        env_required("NEEDED")


def test_postgres_database_url_becomes_a_bounded_connection() -> None:
    config = database_config("postgres://alice:s3cret@db.internal:6543/rescaler")

    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("rescaler", "alice", "s3cret")
    assert (config["HOST"], config["PORT"]) == ("db.internal", 6543)
    assert config["OPTIONS"]["connect_timeout"] == 10  # never hang on a dead database
    assert config["CONN_MAX_AGE"] == 0


def test_sqlite_database_url_is_set_up_for_several_processes(tmp_path: Path) -> None:
    config = database_config(f"sqlite:///{tmp_path}/db.sqlite3")

    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == f"{tmp_path}/db.sqlite3"
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]


def test_redis_url_with_db_keeps_the_server() -> None:
    assert redis_url_with_db("redis://:pw@cache:6380/0", 1) == "redis://:pw@cache:6380/1"
    assert redis_url_with_db("redis://127.0.0.1:6379", 2) == "redis://127.0.0.1:6379/2"


# --- the local database choice --------------------------------------------------------------


def test_unreachable_default_postgres_falls_back_to_sqlite_with_a_warning(tmp_path: Path) -> None:
    sqlite = tmp_path / "var" / "rescaler.sqlite3"

    choice = dbsetup.choose_local_database(None, UNREACHABLE_PG, sqlite)

    assert choice.url == f"sqlite:///{sqlite}"
    assert choice.warning is not None
    assert "not reachable" in choice.warning
    assert "pg_ctlcluster" in choice.warning  # says how to start Postgres
    assert sqlite.parent.is_dir()


def test_unreachable_explicit_database_url_is_kept_not_replaced(tmp_path: Path) -> None:
    choice = dbsetup.choose_local_database(UNREACHABLE_PG, "unused", tmp_path / "x.sqlite3")

    assert choice.url == UNREACHABLE_PG
    assert choice.warning is not None


def test_missing_postgres_database_is_created(postgres_service: str) -> None:
    name = f"rescaler_dbsetup_{uuid.uuid4().hex[:8]}"
    server = urlsplit(postgres_service)
    url = urlunsplit((server.scheme, server.netloc, f"/{name}", "", ""))
    try:
        assert dbsetup.postgres_state(url)[0] is dbsetup.DbState.MISSING

        choice = dbsetup.choose_local_database(url)

        assert choice.created is True
        assert choice.url == url
        assert dbsetup.postgres_state(url)[0] is dbsetup.DbState.READY
        # Idempotent: the second run finds it.
        assert dbsetup.choose_local_database(url).created is False
    finally:
        admin_url = urlunsplit(("postgresql", server.netloc, "/postgres", "", ""))
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_redact_hides_the_password() -> None:
    assert dbsetup.redact("postgres://u:pw@h:5432/d") == "postgres://u:***@h:5432/d"
    assert dbsetup.redact("postgres://u@h/d") == "postgres://u@h/d"


# --- each settings module, imported fresh in a subprocess -----------------------------------

PRINT_SETTINGS = (
    "import json, django; from django.conf import settings; django.setup(); "
    "d = settings.DATABASES['default']; "
    "print(json.dumps({'engine': d['ENGINE'], 'name': d['NAME'], 'host': d.get('HOST'), "
    "'redis': settings.REDIS_URL, 'broker': settings.CELERY_BROKER_URL, "
    "'spark': settings.SPARK_MASTER, 'state_dir': str(settings.STATE_DIR), "
    "'debug': settings.DEBUG, 'hosts': settings.ALLOWED_HOSTS, "
    "'layer': settings.CHANNEL_LAYERS['default']['CONFIG']['hosts']}))"
)
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "SYSTEMROOT")


def _settings_in_subprocess(module: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k in BASE_ENV_KEYS}
    clean.update({"DJANGO_SETTINGS_MODULE": module, **env})
    return subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_refuses_to_start_without_secret_key() -> None:
    result = _settings_in_subprocess(
        "rescaler.settings.production", ALLOWED_HOSTS="rescaler.example"
    )

    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_reads_every_service_from_the_environment() -> None:
    result = _settings_in_subprocess(
        "rescaler.settings.production",
        SECRET_KEY="x" * 50,
        ALLOWED_HOSTS="rescaler.example,admin.rescaler.example",
        DATABASE_URL="postgres://rescaler:pw@postgres:5432/rescaler_prod",
        REDIS_URL="redis://redis:6379/0",
        SPARK_MASTER="spark://spark-master:7077",
        STATE_DIR="/var/lib/rescaler/state",
    )

    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["engine"] == "django.db.backends.postgresql"
    assert (values["name"], values["host"]) == ("rescaler_prod", "postgres")
    assert values["redis"] == values["broker"] == "redis://redis:6379/0"
    assert values["layer"] == ["redis://redis:6379/0"]
    assert values["spark"] == "spark://spark-master:7077"
    assert values["state_dir"] == "/var/lib/rescaler/state"
    assert values["debug"] is False
    assert values["hosts"] == ["rescaler.example", "admin.rescaler.example"]


def test_production_requires_allowed_hosts() -> None:
    result = _settings_in_subprocess("rescaler.settings.production", SECRET_KEY="x" * 50)

    assert result.returncode != 0
    assert "ALLOWED_HOSTS" in result.stderr


def test_defaults_are_the_local_services() -> None:
    result = _settings_in_subprocess("rescaler.settings.test")

    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert (values["name"], values["host"]) == ("rescaler", "127.0.0.1")
    assert values["spark"] == "local[2]"
    assert values["state_dir"] == str(REPO / "var" / "state")
    # Tests keep to Redis database 1, apart from a running scripts/dev on database 0.
    assert values["redis"] == values["broker"] == "redis://127.0.0.1:6379/1"


def test_local_settings_use_an_explicit_database_url_as_given(tmp_path: Path) -> None:
    explicit = f"sqlite:///{tmp_path}/dev.sqlite3"
    result = _settings_in_subprocess("rescaler.settings.local", DATABASE_URL=explicit)

    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["engine"] == "django.db.backends.sqlite3"
    assert values["debug"] is True
