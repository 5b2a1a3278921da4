"""Reads that ride out a Postgres restart instead of failing.

An immediate restart of Postgres (a failover, a crash and its recovery, an operator's restart)
drops every connection and refuses new ones for a few seconds. Without this, every request in
that window answers 500. With it, a read (GET or HEAD) that finds the database gone waits for
it, up to ``RESCALER_DB_WAIT_S`` (10 s), then runs its view again on a new connection and is
answered as if nothing happened, only later. A write is never run again here (it may have
changed something before the connection broke): it answers 503 with a ``Retry-After`` and the
reason, so that the client (the console's form, an automation) decides whether to send it again.
The API's 503 is its usual error body, ``{"code": "database_unavailable", "detail": ...}``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

DATABASE_DOWN = (OperationalError, InterfaceError)
SAFE_METHODS = ("GET", "HEAD")
RETRY_AFTER_S = 5


def database_back(deadline: float, poll_s: float = 0.25) -> bool:
    """Whether a new connection to the database opens before ``deadline`` (monotonic)."""
    while True:
        connection.close()  # the broken one, so that the next query opens a new one
        try:
            connection.ensure_connection()
            return True
        except DATABASE_DOWN:
            if time.monotonic() + poll_s > deadline:
                return False
            time.sleep(poll_s)


class DatabaseOutageMiddleware:
    """Reads wait out a short database outage; writes are told to retry (module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DATABASE_DOWN):
            return None
        wait_s = float(settings.RESCALER_DB_WAIT_S)
        deadline = time.monotonic() + wait_s
        if request.method in SAFE_METHODS:
            attempts = 0
            while database_back(deadline):
                attempts += 1
                match = request.resolver_match
                if match is None:
                    break
                try:
                    answer: Any = match.func(request, *match.args, **match.kwargs)
                    if hasattr(answer, "render") and callable(answer.render):
                        answer = answer.render()
                except DATABASE_DOWN:
                    continue  # went away again: wait again, within the same deadline
                log.warning(
                    "%s %s: the database was unavailable; answered after it came back "
                    "(%d attempts)",
                    request.method,
                    request.path,
                    attempts,
                )
                return cast(HttpResponse, answer)
        with contextlib.suppress(*DATABASE_DOWN):
            connection.close()  # broken: the next request opens a new one
        log.warning(
            "%s %s: the database is unavailable: %s", request.method, request.path, exception
        )
        reason = (
            "the database is unavailable (restarting?): try again in a few seconds; "
            "GET /healthz says when it is back"
        )
        response: HttpResponse
        if request.path.startswith("/api/"):
            response = JsonResponse({"code": "database_unavailable", "detail": reason}, status=503)
        else:
            response = HttpResponse(
                f"<!doctype html><title>Database unavailable</title><p>{reason}</p>",
                status=503,
                content_type="text/html; charset=utf-8",
            )
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
