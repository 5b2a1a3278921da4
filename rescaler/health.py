"""The system's health: each service the product needs, up or down, with what to do when down.

``system_health()`` is the service behind ``GET /healthz`` and the dashboard's status panel.
Every check is bounded in time (about 1 s for the Celery ping, 2 s for Redis, 3 s for Postgres),
so health can always be answered, even when a service hangs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import connection

from rescaler.celery import app as celery_app

logger = logging.getLogger(__name__)

Component = dict[str, Any]

CELERY_PING_TIMEOUT_S = 1.0
REDIS_TIMEOUT_S = 2.0

START_REDIS = (
    "start Redis (`redis-server --daemonize yes --save '' --appendonly no`, or "
    "`sudo service redis-server start`), or point REDIS_URL at a running one"
)
START_POSTGRES = (
    "start Postgres (`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, "
    "or `sudo service postgresql start`), or point DATABASE_URL at a running one"
)
START_CELERY = "start a worker: `celery -A rescaler worker -l info -c 1` (scripts/dev starts one)"
START_RUNNER = (
    "start the pipeline runner: `python manage.py run_pipeline --pipeline clickstream` "
    "(scripts/dev starts one); its log says why it stopped"
)


def _up(**details: Any) -> Component:
    return {"status": "up", **details}


def _down(error: str, **details: Any) -> Component:
    return {"status": "down", **details, "error": error}


def check_database() -> Component:
    vendor = connection.vendor
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:
        return _down(f"{type(exc).__name__}: {exc}".strip() + f" — {START_POSTGRES}", vendor=vendor)
    return _up(vendor=vendor, name=str(connection.settings_dict["NAME"]))


def _redis_ping(url: str) -> None:
    client = redis.Redis.from_url(
        url, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()


def check_redis() -> Component:
    try:
        _redis_ping(settings.REDIS_URL)
    except Exception as exc:
        return _down(f"{type(exc).__name__}: {exc} — {START_REDIS}")
    return _up()


def check_celery() -> Component:
    broker = str(settings.CELERY_BROKER_URL)
    if broker.startswith(("redis://", "rediss://")):
        # Celery's publisher retries a dead broker for a long time; ask Redis first, quickly.
        try:
            _redis_ping(broker)
        except Exception as exc:
            return _down(
                f"the broker does not answer ({type(exc).__name__}: {exc}) — {START_REDIS}"
            )
    try:
        with celery_app.connection_for_write(broker) as connection:
            replies = celery_app.control.ping(timeout=CELERY_PING_TIMEOUT_S, connection=connection)
    except Exception as exc:
        return _down(f"ping failed ({type(exc).__name__}: {exc}) — {START_CELERY}")
    workers = sorted(name for reply in replies for name in reply)
    if not workers:
        return _down(
            f"no worker answered a ping within {CELERY_PING_TIMEOUT_S:g} s — {START_CELERY}",
            workers=[],
        )
    return _up(workers=workers)


def _runner_status() -> dict[str, Any] | None:
    # Imported here: the cluster app owns the runner's registration, and health must still
    # answer (runner down, with the reason) if that import fails.
    from rescaler.cluster.selectors import runner_status

    return runner_status()


def check_runner_and_spark() -> tuple[Component, Component]:
    """The pipeline runner (heartbeat, last epoch) and the Spark application it drives."""
    stale_s = float(settings.RESCALER_HEARTBEAT_STALE_S)
    try:
        status = _runner_status()
    except ImportError as exc:
        reason = f"the cluster app is not available ({exc})"
        return _down(reason), _down(f"unknown: {reason}")
    except Exception as exc:
        reason = f"cannot read the runner's status ({type(exc).__name__}: {exc})"
        return _down(reason), _down(f"unknown: {reason}")

    if status is None:
        reason = f"no pipeline runner has ever registered — {START_RUNNER}"
        return _down(reason), _down("no Spark application: no runner has registered")

    raw_age = status.get("heartbeat_age_s")
    age = float(raw_age) if raw_age is not None else math.inf
    fresh = age < stale_s
    silence = f"for {age:.0f} s" if math.isfinite(age) else "ever recorded"
    run_state = status.get("status", "unknown")
    runner_details = {
        "pipeline": status.get("pipeline"),
        "state": run_state,
        "last_epoch": status.get("last_epoch"),
        # JSON has no infinity: a runner that never beat has no age.
        "heartbeat_age_s": round(age, 3) if math.isfinite(age) else None,
        # where its start went, phase by phase, and the phase it waits in now
        "start": status.get("start") or {},
    }
    if run_state == "starting" and fresh:
        said = _start_said(runner_details["start"])
        runner = _down(f"the runner is starting: {said}", **runner_details)
    elif run_state not in ("running", "starting"):
        runner = _down(f"the runner is {run_state} — {START_RUNNER}", **runner_details)
    elif not fresh:
        runner = _down(
            f"no heartbeat {silence} (limit {stale_s:g} s): the runner is stuck or gone "
            f"— {START_RUNNER}",
            **runner_details,
        )
    elif not isinstance(status.get("last_epoch"), int) or status["last_epoch"] < 0:
        runner = _down(
            "the runner has committed no epoch yet (Spark is starting, or its first epoch "
            "failed: see the runner's log)",
            **runner_details,
        )
    else:
        runner = _up(**runner_details)

    spark_info = status.get("spark") or {}
    spark_details = {
        "master": spark_info.get("master"),
        "app_id": spark_info.get("app_id"),
        "executors": spark_info.get("executors"),
        "version": spark_info.get("version"),
        "ui_url": spark_info.get("ui_url"),
    }
    if not spark_info.get("alive"):
        spark = _down(
            f"the runner reports its Spark application is not alive (master "
            f"{spark_details['master']}); check the master and the runner's log",
            **spark_details,
        )
    elif not fresh:
        spark = _down(
            f"no fresh heartbeat from the runner (none {silence}), so its last report of Spark "
            "cannot be trusted",
            **spark_details,
        )
    else:
        spark = _up(**spark_details)
    return runner, spark


def _start_said(start: dict[str, Any]) -> str:
    """The phase a starting runner waits in, and for how long, in words."""
    running = start.get("running") or []
    if running:
        now = ", ".join(f"{p['name']} for {float(p['for_s']):.0f} s" for p in running)
    else:
        now = "between phases"
    return f"{now} ({float(start.get('elapsed_s') or 0):.0f} s since it began)"


def system_health() -> tuple[bool, dict[str, Component]]:
    """All components, and whether every one is up.

    Returns ``(all_up, {"database": ..., "redis": ..., "celery": ..., "runner": ..., "spark": ...})``
    where each component is ``{"status": "up"|"down", ...details}`` plus ``"error"`` (what is
    wrong and what to do next) when down.
    """
    checks: dict[str, Callable[[], Component]] = {
        "database": check_database,
        "redis": check_redis,
        "celery": check_celery,
    }
    components: dict[str, Component] = {}
    for name, check in checks.items():
        try:
            components[name] = check()
        except Exception as exc:  # a bug in a check must not hide the other components
            logger.exception("health check %s failed", name)
            components[name] = _down(f"the check itself failed: {type(exc).__name__}: {exc}")
    if components["database"]["status"] == "up":
        components["runner"], components["spark"] = check_runner_and_spark()
    else:
        # The runner reports through the database; without it there is nothing to read.
        unknown = "unknown: the runner reports through the database, which is down"
        components["runner"], components["spark"] = _down(unknown), _down(unknown)
    return all(c["status"] == "up" for c in components.values()), components


# What a caller who is not signed in sees of each component besides its status: figures that
# name nothing. Host names, database and worker names, the Spark master, application id and UI
# URL, and every error message (exception texts quote hosts and URLs) stay with signed-in users.
PUBLIC_DETAILS: dict[str, tuple[str, ...]] = {
    "runner": ("state", "last_epoch", "heartbeat_age_s", "start"),
}


def public_components(components: dict[str, Component]) -> dict[str, Component]:
    """The components as an anonymous caller (a load balancer) may see them: each one's status
    and the allow-listed figures of ``PUBLIC_DETAILS``; an allow-list, so a detail added to a
    check later stays private until someone decides otherwise."""
    public: dict[str, Component] = {}
    for name, component in components.items():
        shown = {
            key: component[key]
            for key in PUBLIC_DETAILS.get(name, ())
            if isinstance(component.get(key), int | float | str)
        }
        public[name] = {"status": component["status"], **shown}
    return public


def down_components(components: dict[str, Component]) -> list[str]:
    return [name for name, component in components.items() if component["status"] != "up"]
