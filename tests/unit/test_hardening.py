"""Abuse and exposure: sign-in lockout, API throttles, deploy-ready production settings, the API
docs and /healthz's details for signed-in users only (docs/configuration.md, "Behind a TLS proxy").

The suite's settings (rescaler.settings.test) leave the throttles off and the docs and health
details public, as the other tests expect; each test here sets the production behaviour it
checks with ``settings`` (pytest-django's override_settings) and starts from an empty cache.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from rescaler import health
from rescaler.settings.env import env_lockout_parameters, env_rate

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "correct-horse-battery-staple"
STRONG_SECRET = "k3Y-" + "x9Qz_7mP2wLr5tVb8nJc4hGd6fSa1eUo" * 2  # 50+ chars, no known prefix


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    """Throttle counts live in the cache, which outlives a test: start each one from zero."""
    cache.clear()


def _user(username: str, **extra: Any) -> Any:
    return get_user_model().objects.create_user(username=username, password=PASSWORD, **extra)


def _token_client(user: Any, address: str = "10.0.0.1") -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


# --- 1. sign-in lockout (django-axes) -------------------------------------------------------


def _sign_in(client: Client, path: str, username: str, password: str) -> Any:
    return client.post(path, {"username": username, "password": password})


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_the_client_out(settings: Any, path: str) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    _user("alice", is_staff=True)
    client = Client(REMOTE_ADDR="10.0.0.7")

    answers = [_sign_in(client, path, "alice", "wrong").status_code for _ in range(3)]

    assert answers == [200, 200, 429]  # the form again twice, then the lockout
    locked = _sign_in(client, path, "alice", PASSWORD)  # even the right password now
    assert locked.status_code == 429
    assert "Too many failed sign-in attempts" in locked.content.decode()
    assert "for 15 minutes" in locked.content.decode()
    assert "_auth_user_id" not in client.session  # not signed in


@pytest.mark.django_db
def test_lockout_ends_after_the_cool_off_and_spares_other_clients(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 2
    _user("bob")
    attacker = Client(REMOTE_ADDR="10.0.0.8")
    for _ in range(2):
        _sign_in(attacker, "/accounts/login/", "bob", "wrong")
    assert _sign_in(attacker, "/accounts/login/", "bob", PASSWORD).status_code == 429

    # The real user on another machine is not locked out by a stranger (username+ip_address).
    elsewhere = Client(REMOTE_ADDR="10.0.0.9")
    assert _sign_in(elsewhere, "/accounts/login/", "bob", PASSWORD).status_code == 302

    # Once the cool-off has passed, the locked client may try again.
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert _sign_in(attacker, "/accounts/login/", "bob", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_a_successful_sign_in_resets_the_count(settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    _user("carol")
    client = Client(REMOTE_ADDR="10.0.0.10")
    for _ in range(2):
        _sign_in(client, "/accounts/login/", "carol", "wrong")
    assert _sign_in(client, "/accounts/login/", "carol", PASSWORD).status_code == 302
    client.logout()

    for _ in range(2):
        assert _sign_in(client, "/accounts/login/", "carol", "wrong").status_code == 200


@pytest.mark.django_db
def test_server_side_authenticate_without_a_request_still_works() -> None:
    """The test client's login() (and a shell) call authenticate() without a request."""
    _user("dave")
    assert Client().login(username="dave", password=PASSWORD)


# --- 2. API throttles ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_mutations_are_throttled_per_user_with_the_api_error_body(settings: Any) -> None:
    settings.RESCALER_THROTTLE_MUTATIONS = "2/minute"
    alice, bob = _user("alice"), _user("bob")
    client = _token_client(alice)

    # /audit is read-only, so the mutations are 405: but throttles run before the method is
    # looked up, so they still count, whatever the endpoint.
    assert client.post("/api/v1/audit", {}, format="json").status_code == 405
    assert client.delete("/api/v1/audit").status_code == 405
    for method in (client.post, client.put, client.patch, client.delete):
        throttled = method("/api/v1/audit")
        assert throttled.status_code == 429
        assert throttled.json()["code"] == "throttled"
        assert set(throttled.json()) == {"code", "detail"}
        assert 0 < int(throttled["Retry-After"]) <= 60

    # Reads are never throttled, and each user has a budget of their own.
    assert all(client.get("/api/v1/audit").status_code == 200 for _ in range(5))
    assert _token_client(bob).post("/api/v1/audit").status_code == 405


@pytest.mark.django_db
def test_mutations_are_not_throttled_when_the_rate_is_off(settings: Any) -> None:
    settings.RESCALER_THROTTLE_MUTATIONS = None
    client = _token_client(_user("alice"))
    assert all(client.post("/api/v1/audit").status_code == 405 for _ in range(10))


@pytest.mark.django_db
def test_a_flood_of_wrong_tokens_is_throttled_per_client(settings: Any) -> None:
    settings.RESCALER_THROTTLE_BAD_TOKENS = "3/minute"
    guesser = APIClient(REMOTE_ADDR="10.0.0.66")

    answers = []
    for n in range(5):
        # X-Forwarded-For is not believed (RESCALER_TRUSTED_PROXIES=0): no fresh address per try
        guesser.credentials(HTTP_AUTHORIZATION=f"Token guess{n}", HTTP_X_FORWARDED_FOR=f"1.2.3.{n}")
        answers.append(guesser.get("/api/v1/audit"))

    assert [r.status_code for r in answers] == [401, 401, 401, 429, 429]
    assert answers[0].json()["code"] == "authentication_failed"
    assert answers[3].json()["code"] == "throttled"
    assert "Retry-After" in answers[3]

    # A right guess during the cool-down gains nothing...
    user = _user("alice")
    token = Token.objects.create(user=user).key
    guesser.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert guesser.get("/api/v1/audit").status_code == 429
    # ...while other clients, and requests without a token, are not affected.
    honest = APIClient(REMOTE_ADDR="10.0.0.2")
    honest.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert honest.get("/api/v1/audit").status_code == 200
    assert APIClient(REMOTE_ADDR="10.0.0.66").get("/api/v1/audit").status_code == 401


@pytest.mark.django_db
def test_behind_a_trusted_proxy_each_client_is_counted_apart(settings: Any) -> None:
    settings.RESCALER_THROTTLE_BAD_TOKENS = "1/minute"
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    proxy = APIClient(REMOTE_ADDR="172.18.0.5")

    proxy.credentials(HTTP_AUTHORIZATION="Token nope", HTTP_X_FORWARDED_FOR="203.0.113.1")
    assert proxy.get("/api/v1/audit").status_code == 401
    assert proxy.get("/api/v1/audit").status_code == 429
    proxy.credentials(HTTP_AUTHORIZATION="Token nope", HTTP_X_FORWARDED_FOR="203.0.113.2")
    assert proxy.get("/api/v1/audit").status_code == 401


# --- 4. API schema and docs ---------------------------------------------------------------------

DOC_PAGES = ("/api/docs/", "/api/redoc/")
SCHEMA_JSON = "application/vnd.oai.openapi+json"


@pytest.mark.django_db
def test_api_docs_need_sign_in_unless_public(settings: Any) -> None:
    settings.RESCALER_PUBLIC_API_DOCS = False
    anon = APIClient()

    schema = anon.get("/api/schema/", HTTP_ACCEPT=SCHEMA_JSON)
    assert schema.status_code == 401
    assert schema.json()["code"] == "not_authenticated"
    for page in DOC_PAGES:
        response = anon.get(page)
        assert response.status_code == 302
        assert response["Location"] == f"/accounts/login/?next={page}"

    signed_in = APIClient()
    signed_in.force_login(_user("alice"))
    assert signed_in.get("/api/schema/", HTTP_ACCEPT=SCHEMA_JSON).status_code == 200
    assert all(signed_in.get(page).status_code == 200 for page in DOC_PAGES)
    assert _token_client(_user("bot")).get("/api/schema/").status_code == 200

    settings.RESCALER_PUBLIC_API_DOCS = True
    assert anon.get("/api/schema/", HTTP_ACCEPT=SCHEMA_JSON).status_code == 200
    assert all(anon.get(page).status_code == 200 for page in DOC_PAGES)


# --- 5. /healthz without internal names for anonymous callers ---------------------------------

INTERNAL_NAMES = (
    "rescaler_prod",
    "redis.internal",
    "celery@web-7f9c",
    "spark://spark-master:7077",
    "app-20261121-0007",
    "http://runner:4040",
    "clickstream",
)


@pytest.fixture
def internal_health(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check up but Redis, each reporting the internal names a real deployment has."""
    monkeypatch.setattr(
        health,
        "check_database",
        lambda: {"status": "up", "vendor": "postgresql", "name": "rescaler_prod"},
    )
    monkeypatch.setattr(
        health,
        "check_redis",
        lambda: {"status": "down", "error": "ConnectionError: redis.internal:6379 refused"},
    )
    monkeypatch.setattr(
        health, "check_celery", lambda: {"status": "up", "workers": ["celery@web-7f9c"]}
    )
    monkeypatch.setattr(
        health,
        "_runner_status",
        lambda: {
            "pipeline": "clickstream",
            "last_epoch": 41,
            "heartbeat_age_s": 1.5,
            "status": "running",
            "spark": {
                "alive": True,
                "master": "spark://spark-master:7077",
                "app_id": "app-20261121-0007",
                "ui_url": "http://runner:4040",
                "executors": 2,
            },
        },
    )


@pytest.mark.django_db
def test_healthz_hides_internal_names_from_anonymous_callers(
    settings: Any, internal_health: None
) -> None:
    settings.RESCALER_PUBLIC_HEALTH_DETAILS = False

    response = Client().get("/healthz")

    assert response.status_code == 503  # the load balancer still learns it is down
    body = response.json()
    assert body["status"] == "down"
    assert body["down"] == ["redis"]
    assert {n: c["status"] for n, c in body["components"].items()} == {
        "database": "up",
        "redis": "down",
        "celery": "up",
        "runner": "up",
        "spark": "up",
    }
    assert body["components"]["runner"]["last_epoch"] == 41  # figures that name nothing
    text = response.content.decode()
    for name in INTERNAL_NAMES:
        assert name not in text


@pytest.mark.django_db
def test_healthz_shows_everything_to_signed_in_users(settings: Any, internal_health: None) -> None:
    settings.RESCALER_PUBLIC_HEALTH_DETAILS = False
    client = Client()
    client.force_login(_user("alice"))

    response = client.get("/healthz")

    assert response.status_code == 503
    text = response.content.decode()
    for name in INTERNAL_NAMES:
        assert name in text
    assert "refused" in response.json()["components"]["redis"]["error"]


# --- settings, from the environment of a fresh process ------------------------------------------

BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "SYSTEMROOT")


def _run(args: list[str], module: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k in BASE_ENV_KEYS}
    clean.update({"DJANGO_SETTINGS_MODULE": module, **env})
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


PRODUCTION_ENV = {"SECRET_KEY": STRONG_SECRET, "ALLOWED_HOSTS": "rescaler.example"}
PRINT_HARDENING = (
    "import json, django; from django.conf import settings; django.setup(); "
    "names = ['RESCALER_PUBLIC_API_DOCS', 'RESCALER_PUBLIC_HEALTH_DETAILS', "
    "'RESCALER_THROTTLE_MUTATIONS', 'RESCALER_THROTTLE_BAD_TOKENS', 'AXES_FAILURE_LIMIT', "
    "'AXES_LOCKOUT_PARAMETERS', 'SECURE_PROXY_SSL_HEADER', 'SECURE_SSL_REDIRECT', "
    "'SECURE_HSTS_SECONDS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE']; "
    "values = {n: getattr(settings, n) for n in names}; "
    "values['cooloff_s'] = settings.AXES_COOLOFF_TIME.total_seconds(); "
    "values['num_proxies'] = settings.REST_FRAMEWORK['NUM_PROXIES']; "
    "print(json.dumps(values))"
)


def _hardening(module: str, **env: str) -> dict[str, Any]:
    result = _run(["-c", PRINT_HARDENING], module, **env)
    assert result.returncode == 0, result.stderr
    values: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return values


def test_production_defaults_are_closed_and_local_ones_open() -> None:
    production = _hardening("rescaler.settings.production", **PRODUCTION_ENV)
    assert production["RESCALER_PUBLIC_API_DOCS"] is False
    assert production["RESCALER_PUBLIC_HEALTH_DETAILS"] is False
    assert production["RESCALER_THROTTLE_MUTATIONS"] == "30/minute"
    assert production["RESCALER_THROTTLE_BAD_TOKENS"] == "10/minute"
    assert production["AXES_FAILURE_LIMIT"] == 5
    assert production["cooloff_s"] == 15 * 60
    assert production["AXES_LOCKOUT_PARAMETERS"] == [["username", "ip_address"]]
    assert production["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert production["SECURE_SSL_REDIRECT"] is True
    assert production["SESSION_COOKIE_SECURE"] is production["CSRF_COOKIE_SECURE"] is True
    assert production["num_proxies"] == 0

    local = _hardening("rescaler.settings.local", DATABASE_URL="sqlite:///:memory:")
    assert local["RESCALER_PUBLIC_API_DOCS"] is True
    assert local["RESCALER_PUBLIC_HEALTH_DETAILS"] is True


def test_every_limit_is_read_from_the_environment() -> None:
    values = _hardening(
        "rescaler.settings.production",
        **PRODUCTION_ENV,
        RESCALER_PUBLIC_API_DOCS="1",
        RESCALER_PUBLIC_HEALTH_DETAILS="true",
        RESCALER_THROTTLE_MUTATIONS="5/second",
        RESCALER_THROTTLE_BAD_TOKENS="off",
        RESCALER_LOGIN_FAILURE_LIMIT="7",
        RESCALER_LOGIN_COOLOFF_MINUTES="2",
        RESCALER_LOGIN_LOCKOUT_BY="ip_address",
        RESCALER_TRUSTED_PROXIES="1",
        RESCALER_TLS="direct",
        SECURE_HSTS_SECONDS="3600",
        SECURE_COOKIES="false",
    )
    assert values["RESCALER_PUBLIC_API_DOCS"] is values["RESCALER_PUBLIC_HEALTH_DETAILS"] is True
    assert values["RESCALER_THROTTLE_MUTATIONS"] == "5/second"
    assert values["RESCALER_THROTTLE_BAD_TOKENS"] is None
    assert (values["AXES_FAILURE_LIMIT"], values["cooloff_s"]) == (7, 120)
    assert values["AXES_LOCKOUT_PARAMETERS"] == ["ip_address"]
    assert values["num_proxies"] == 1
    assert values["SECURE_PROXY_SSL_HEADER"] is None  # no proxy: the header is not trusted
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] == 3600
    assert values["SESSION_COOKIE_SECURE"] is False


def test_malformed_limits_stop_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATE", "thirty per minute")
    with pytest.raises(ImproperlyConfigured, match="RATE"):
        env_rate("RATE", "30/minute")
    monkeypatch.setenv("RATE", " 30/Minute ")
    assert env_rate("RATE", None) == "30/minute"
    monkeypatch.setenv("LOCK", "username+ip_address,ip_address")
    assert env_lockout_parameters("LOCK", "ip_address") == [
        ["username", "ip_address"],
        "ip_address",
    ]
    monkeypatch.setenv("LOCK", "cookie")
    with pytest.raises(ImproperlyConfigured, match="LOCK"):
        env_lockout_parameters("LOCK", "ip_address")


# --- 3. check --deploy -------------------------------------------------------------------------


def _check_deploy(**env: str) -> subprocess.CompletedProcess[str]:
    result = _run(["manage.py", "check", "--deploy"], "rescaler.settings.production", **env)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _deploy_warnings(**env: str) -> list[str]:
    result = _check_deploy(**env)
    # each issue is printed as "<object>: (<id>) <message>"
    return re.findall(r"^\S+: \(([\w.]+)\) ", result.stdout + result.stderr, re.MULTILINE)


def test_production_settings_pass_check_deploy_behind_a_tls_proxy() -> None:
    """No issue of any kind: neither a deployment one nor a note of drf-spectacular's on the API
    schema (which the checks generate too), none silenced, and no Python warning either."""
    result = _check_deploy(**PRODUCTION_ENV)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues (0 silenced)." in result.stdout, output
    assert re.search("warn", output, re.IGNORECASE) is None, output


def test_check_deploy_still_catches_plain_http_and_overrides() -> None:
    """The test above is not blind: without TLS, or with HSTS turned off, warnings come back."""
    plain = _deploy_warnings(**PRODUCTION_ENV, RESCALER_TLS="off")
    assert {"security.W004", "security.W008", "security.W012", "security.W016"} <= set(plain)
    assert _deploy_warnings(**PRODUCTION_ENV, SECURE_HSTS_SECONDS="0") == ["security.W004"]


def test_the_api_schema_generates_without_warnings(tmp_path: Path, settings: Any) -> None:
    """Every field, endpoint and parameter of the API resolves to a declared type (nothing
    guessed), no two enums collide, and the schema is valid OpenAPI: a new warning fails here
    (and in check --deploy) rather than slipping into the published schema."""
    schema_file = tmp_path / "schema.json"
    strict = ["--validate", "--fail-on-warn", "--format", "openapi-json"]
    result = _run(
        ["manage.py", "spectacular", *strict, "--file", str(schema_file)], "rescaler.settings.test"
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search("warn|error", output, re.IGNORECASE) is None, output

    # Each enum name of the settings is in the schema: an override that matches no field's
    # choices is silently ignored, and the enum gets a name derived from a field (or a hash).
    components = json.loads(schema_file.read_text())["components"]["schemas"]
    assert set(settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]) <= set(components)
