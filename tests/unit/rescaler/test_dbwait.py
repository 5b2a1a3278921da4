"""A Postgres restart seen from a request (``rescaler/dbwait.py``): a read waits for the database
and is answered; a write, or a read whose database does not come back in time, gets a 503 with
``Retry-After`` and the reason, never Django's 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import OperationalError
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import ResolverMatch

from rescaler import dbwait


class FlakyView:
    """A view whose first ``failures`` calls find the database gone."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, request: Any, **kwargs: Any) -> HttpResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise OperationalError("server closed the connection unexpectedly")
        return HttpResponse(f"answer for {kwargs['name']}")


def _request(method: str, path: str, view: FlakyView) -> Any:
    request = getattr(RequestFactory(), method.lower())(path)
    request.resolver_match = ResolverMatch(view, (), {"name": "w1"})
    return request


def _handle(request: Any, view: FlakyView) -> HttpResponse:
    """What Django does: the view raises, the middleware's process_exception answers."""
    middleware = dbwait.DatabaseOutageMiddleware(lambda r: HttpResponse())
    try:
        return view(request, **request.resolver_match.kwargs)
    except OperationalError as exc:
        response = middleware.process_exception(request, exc)
        assert response is not None, "left to Django: a 500"
        return response


def test_a_read_waits_for_the_database_and_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dbwait, "database_back", lambda deadline: True)
    view = FlakyView(failures=2)  # the first run, and the first run again
    response = _handle(_request("GET", "/api/v1/workers/w1", view), view)
    assert response.status_code == 200 and response.content == b"answer for w1"
    assert view.calls == 3


def test_a_read_whose_database_stays_down_gets_503_with_retry_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dbwait, "database_back", lambda deadline: False)
    view = FlakyView(failures=1)
    response = _handle(_request("GET", "/api/v1/cluster", view), view)
    assert response.status_code == 503 and response["Retry-After"]
    body = json.loads(response.content)
    assert body["code"] == "database_unavailable" and "try again" in body["detail"]
    assert view.calls == 1


def test_a_write_is_never_run_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    back = []
    monkeypatch.setattr(dbwait, "database_back", lambda deadline: back.append(1) or True)
    view = FlakyView(failures=1)
    response = _handle(_request("POST", "/api/v1/workers/w1/cordon", view), view)
    assert response.status_code == 503 and view.calls == 1 and not back


def test_a_page_gets_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dbwait, "database_back", lambda deadline: False)
    view = FlakyView(failures=1)
    response = _handle(_request("GET", "/cluster/", view), view)
    assert response.status_code == 503 and response["Content-Type"].startswith("text/html")
    assert b"database is unavailable" in response.content


def test_other_errors_are_left_to_django() -> None:
    middleware = dbwait.DatabaseOutageMiddleware(lambda r: HttpResponse())
    request = RequestFactory().get("/api/v1/cluster")
    assert middleware.process_exception(request, ValueError("a bug")) is None


def test_the_middleware_is_installed() -> None:
    from django.conf import settings

    assert "rescaler.dbwait.DatabaseOutageMiddleware" in settings.MIDDLEWARE
