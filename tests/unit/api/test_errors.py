"""The exception handler: every refusal becomes {"code", "detail"} with its 4xx (no database)."""

from __future__ import annotations

import pytest
from django.http import Http404
from rest_framework import exceptions

from dashboard.api.errors import FIELD_BY_CODE, STATUS_BY_CODE, ApiError, exception_handler
from rescaler.autoscaling.errors import PolicyInvalid
from rescaler.operations.errors import OperationFinal
from rescaler.operations.placements import PlacementError
from rescaler.operations.plans import PlanError, PlanStale
from workers.rescale import errors

CONTEXT: dict[str, object] = {"view": None, "args": (), "kwargs": {}, "request": None}


def _refusals() -> list[type[errors.RescaleError]]:
    found: list[type[errors.RescaleError]] = []
    todo = [errors.RescaleError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize("cls", _refusals(), ids=lambda c: c.__name__)
def test_every_rescale_error_has_its_code_and_a_4xx(cls: type[errors.RescaleError]) -> None:
    """Every refusal of every app (each imported above, so the list is the same however the
    suite is collected)."""
    if issubclass(cls, PolicyInvalid):  # its reason is one per setting
        exc: errors.RescaleError = cls({"mode": "why"})
        detail = "mode: why"
    else:
        exc, detail = cls("why"), "why"
    response = exception_handler(exc, CONTEXT)
    assert response is not None
    # a refusal with details says its own field (a past placement's: its query parameter)
    extra = exc.details() if isinstance(exc, PlanError | PolicyInvalid | PlacementError) else {}
    if cls.code in FIELD_BY_CODE:
        extra = {"field": FIELD_BY_CODE[cls.code], **extra}
    assert response.data == {"code": cls.code, "detail": detail, **extra}
    assert response.status_code == STATUS_BY_CODE.get(cls.code, 400)


def test_conflicts_and_not_found() -> None:
    assert exception_handler(errors.FragmentBusy("x"), CONTEXT).status_code == 409
    assert exception_handler(OperationFinal("x"), CONTEXT).status_code == 409
    assert exception_handler(errors.UnknownOperation("x"), CONTEXT).status_code == 404
    assert exception_handler(errors.UnknownFragment("x"), CONTEXT).status_code == 400


def test_a_refusal_names_the_request_field_it_concerns() -> None:
    """The console shows it on that field (no mapping of its own)."""
    for exc, field in (
        (errors.FragmentBusy("x"), "changes"),
        (errors.WorkerNotActive("x"), "added_parallel_units"),
        (errors.RemovesEveryUnit("x"), "removed_parallel_units"),
    ):
        response = exception_handler(exc, CONTEXT)
        assert response is not None and response.data["field"] == field
    response = exception_handler(errors.MalformedRequest("x"), CONTEXT)
    assert response is not None and "field" not in response.data


def test_a_plan_refusal_names_its_field_and_what_changed() -> None:
    changed = [{"what": "mapping_version", "fragment": "f", "planned": 1, "now": 2}]
    response = exception_handler(PlanStale("stale", changed), CONTEXT)
    assert response is not None and response.status_code == 409
    assert response.data == {
        "code": "plan_stale", "detail": "stale", "field": "plan_id", "changed": changed,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (exceptions.ParseError("JSON parse error"), 400, "malformed_request"),
        (exceptions.NotAuthenticated(), 401, "not_authenticated"),
        (exceptions.AuthenticationFailed(), 401, "authentication_failed"),
        (exceptions.PermissionDenied(), 403, "permission_denied"),
        (exceptions.NotFound(), 404, "not_found"),
        (Http404("gone"), 404, "not_found"),
        (exceptions.MethodNotAllowed("PUT"), 405, "method_not_allowed"),
        (exceptions.UnsupportedMediaType("text/xml"), 415, "unsupported_media_type"),
        (ApiError("key_too_long", "too long"), 400, "key_too_long"),
        (ApiError("unknown_fragment", "no such", 404), 404, "unknown_fragment"),
    ],
)
def test_drf_and_api_errors(exc: Exception, status: int, code: str) -> None:
    response = exception_handler(exc, CONTEXT)
    assert response is not None and response.status_code == status
    assert response.data["code"] == code and isinstance(response.data["detail"], str)


def test_validation_errors_keep_their_per_parameter_messages() -> None:
    exc = exceptions.ValidationError({"status": ["not a choice"], "page_size": ["not a number"]})
    response = exception_handler(exc, CONTEXT)
    assert response is not None and response.status_code == 400
    assert response.data["code"] == "invalid_parameters"
    assert response.data["errors"] == {"status": ["not a choice"], "page_size": ["not a number"]}
    assert "status: not a choice" in response.data["detail"]


def test_a_bug_is_not_disguised_as_a_refusal() -> None:
    assert exception_handler(KeyError("bug"), CONTEXT) is None
