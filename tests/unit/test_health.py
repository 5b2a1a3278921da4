"""GET /healthz and the health service: status logic, the JSON shape, and the real checks."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from rescaler import health

UP_COMPONENTS = ("database", "redis", "celery", "runner", "spark")


def _runner_status(**overrides: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "pipeline": "clickstream",
        "last_epoch": 41,
        "heartbeat_age_s": 1.5,
        "status": "running",
        "spark": {
            "alive": True,
            "master": "local[2]",
            "app_id": "local-1700000000000",
            "ui_url": "http://localhost:4040",
            "version": "4.3.0",
            "executors": 1,
        },
    }
    status.update(overrides)
    return status


@pytest.fixture
def all_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "check_database", lambda: {"status": "up", "vendor": "postgresql"})
    monkeypatch.setattr(health, "check_redis", lambda: {"status": "up"})
    monkeypatch.setattr(health, "check_celery", lambda: {"status": "up", "workers": ["w@h"]})
    monkeypatch.setattr(health, "_runner_status", _runner_status)


# --- GET /healthz ---------------------------------------------------------------------------


def test_healthz_is_200_with_every_component_when_all_are_up(client: Client, all_up: None) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok"
    assert body["down"] == []
    assert set(body["components"]) == set(UP_COMPONENTS)
    assert all(c["status"] == "up" for c in body["components"].values())
    assert body["components"]["runner"]["last_epoch"] == 41
    assert body["components"]["runner"]["heartbeat_age_s"] == 1.5
    assert body["components"]["spark"]["master"] == "local[2]"
    assert body["components"]["spark"]["executors"] == 1


def test_healthz_is_503_and_names_what_is_down(
    client: Client, all_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        health, "check_celery", lambda: {"status": "down", "workers": [], "error": "no worker"}
    )

    response = client.get("/healthz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down"
    assert body["down"] == ["celery"]
    assert body["components"]["celery"]["error"] == "no worker"
    assert body["components"]["database"]["status"] == "up"


def test_healthz_is_public_get_only_and_never_cached(client: Client, all_up: None) -> None:
    assert client.get("/healthz").status_code == 200  # no login needed
    assert client.post("/healthz").status_code == 405
    assert "no-cache" in client.get("/healthz")["Cache-Control"]


def test_a_failing_check_is_reported_down_not_raised(
    client: Client, all_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("bug in a check")

    monkeypatch.setattr(health, "check_redis", broken)

    body = client.get("/healthz").json()

    assert body["down"] == ["redis"]
    assert "bug in a check" in body["components"]["redis"]["error"]


def test_runner_and_spark_are_unknown_when_the_database_is_down(
    all_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "check_database", lambda: {"status": "down", "error": "refused"})

    ok, components = health.system_health()

    assert not ok
    assert health.down_components(components) == ["database", "runner", "spark"]


# --- the runner and Spark, from runner_status() -----------------------------------------------


def _runner_and_spark(
    monkeypatch: pytest.MonkeyPatch, status: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    monkeypatch.setattr(health, "_runner_status", lambda: status)
    return health.check_runner_and_spark()


def test_fresh_running_runner_and_live_spark_are_up(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, spark = _runner_and_spark(monkeypatch, _runner_status())

    assert runner == {
        "status": "up",
        "pipeline": "clickstream",
        "state": "running",
        "last_epoch": 41,
        "heartbeat_age_s": 1.5,
        "start": {},
    }
    assert spark["status"] == "up"
    assert spark["app_id"] == "local-1700000000000"


def test_a_starting_runner_says_which_phase_it_waits_in(monkeypatch: pytest.MonkeyPatch) -> None:
    start = {
        "phases": [{"name": "spark", "began_s": 0.0, "took_s": 3.2}],
        "running": [{"name": "store check", "for_s": 7.4}],
        "elapsed_s": 10.6,
        "first_epoch_s": None,
    }
    status = {**_runner_status(status="starting", last_epoch=12), "start": start}

    runner, _ = _runner_and_spark(monkeypatch, status)

    assert runner["status"] == "down"
    assert runner["error"] == "the runner is starting: store check for 7 s (11 s since it began)"
    assert runner["start"] == start  # every phase, for an operator to read
    assert runner["last_epoch"] == 12


def test_a_starting_runner_whose_heartbeat_is_stale_is_stuck_or_gone(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.RESCALER_HEARTBEAT_STALE_S = 30
    status = _runner_status(status="starting", heartbeat_age_s=45.0)

    runner, _ = _runner_and_spark(monkeypatch, status)

    assert runner["error"].startswith("no heartbeat for 45 s (limit 30 s): the runner is stuck")


def test_runner_without_a_committed_epoch_is_not_up_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, spark = _runner_and_spark(monkeypatch, _runner_status(last_epoch=-1))

    assert runner["status"] == "down"
    assert "no epoch yet" in runner["error"]
    assert spark["status"] == "up"  # Spark itself is there; the pipeline is not running yet


def test_stale_heartbeat_puts_runner_and_spark_down(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.RESCALER_HEARTBEAT_STALE_S = 30
    runner, spark = _runner_and_spark(monkeypatch, _runner_status(heartbeat_age_s=31.0))

    assert runner["status"] == "down"
    assert "no heartbeat for 31 s" in runner["error"]
    assert runner["last_epoch"] == 41  # still reported: it says where the runner stopped
    assert spark["status"] == "down"


def test_runner_that_never_beat_has_no_age_and_the_json_stays_valid(
    client: Client, all_up: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "_runner_status", lambda: _runner_status(heartbeat_age_s=None))

    response = client.get("/healthz")

    assert b"Infinity" not in response.content  # not JSON; browsers would refuse the body
    runner = response.json()["components"]["runner"]
    assert runner["heartbeat_age_s"] is None
    assert "no heartbeat ever recorded" in runner["error"]


def test_stopped_runner_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, _ = _runner_and_spark(monkeypatch, _runner_status(status="stopped"))

    assert runner["status"] == "down"
    assert "stopped" in runner["error"]


def test_dead_spark_application_is_down_while_runner_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    status = _runner_status()
    status["spark"] = {**status["spark"], "alive": False}

    runner, spark = _runner_and_spark(monkeypatch, status)

    assert runner["status"] == "up"
    assert spark["status"] == "down"
    assert spark["master"] == "local[2]"


def test_never_registered_runner_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    runner, spark = _runner_and_spark(monkeypatch, None)

    assert runner["status"] == spark["status"] == "down"
    assert "run_pipeline --pipeline clickstream" in runner["error"]


def test_missing_cluster_app_reports_the_runner_down_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_cluster_app() -> None:
        raise ImportError("No module named 'rescaler.cluster.selectors'")

    monkeypatch.setattr(health, "_runner_status", no_cluster_app)

    runner, spark = health.check_runner_and_spark()

    assert runner["status"] == "down"
    assert "rescaler.cluster.selectors" in runner["error"]
    assert spark["status"] == "down"


# --- the real checks against the real services ----------------------------------------------


@pytest.mark.django_db
def test_database_check_runs_a_query_on_postgres() -> None:
    component = health.check_database()

    assert component["status"] == "up"
    assert component["vendor"] == "postgresql"


def test_redis_check_pings_the_real_redis(redis_service: str) -> None:
    assert health.check_redis() == {"status": "up"}


def test_redis_check_says_how_to_start_redis_when_it_is_down(settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1

    component = health.check_redis()

    assert component["status"] == "down"
    assert "redis-server" in component["error"]


def test_celery_check_is_down_when_no_worker_answers(redis_service: str, settings: Any) -> None:
    # A broker database of its own: no worker of another test (or of scripts/dev) listens there.
    settings.CELERY_BROKER_URL = redis_service.rsplit("/", 1)[0] + "/14"
    component = health.check_celery()

    assert component["status"] == "down"
    assert component["workers"] == []
    assert "celery -A rescaler worker" in component["error"]


def test_celery_check_does_not_wait_on_a_dead_broker(settings: Any) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"

    component = health.check_celery()

    assert component["status"] == "down"
    assert "broker does not answer" in component["error"]


# --- the dashboard page ---------------------------------------------------------------------


@pytest.mark.django_db
def test_home_requires_login(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_home_shows_components_and_last_epoch(
    client: Client, admin_user: Any, all_up: None
) -> None:
    client.force_login(admin_user)

    response = client.get("/")

    assert response.status_code == 200
    html = response.content.decode()
    for name in UP_COMPONENTS:
        assert f'data-component="{name}"' in html
    # the ticker says the pipeline's last committed epoch (none recorded here)
    assert 'id="last-epoch" class="big">none yet<' in html
    assert "w@h" in html and "['w@h']" not in html  # lists shown as text, not Python
    assert "vendor/htmx/htmx.min.js" in html and 'hx-get="/partials/health"' in html
