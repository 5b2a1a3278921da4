"""Every refusal of the API as ``{"code": "...", "detail": "..."}`` with a 4xx status.

``code`` is stable and machine-readable (automation branches on it); ``detail`` is the reason in
words a person can act on. The protocol's refusals (``workers.rescale.errors.RescaleError`` and
the control plane's ``OperationError``) carry their own code; DRF's exceptions keep theirs
(``not_authenticated``, ``permission_denied``, ``not_found``...), except a body that is not valid
JSON, which is ``malformed_request`` like any other malformed body. Validation errors of query
parameters are ``invalid_parameters`` with the per-parameter messages in ``errors``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from workers.rescale import errors as rescale_errors

# A refusal's HTTP status by its code; every other RescaleError code is a 400 (the request
# cannot be carried out as written).
STATUS_BY_CODE: dict[str, int] = {
    "fragment_busy": status.HTTP_409_CONFLICT,
    "operation_final": status.HTTP_409_CONFLICT,
    "unknown_operation": status.HTTP_404_NOT_FOUND,
    "unknown_worker": status.HTTP_404_NOT_FOUND,
    "worker_status_conflict": status.HTTP_409_CONFLICT,
    "drain_empties_fragment": status.HTTP_409_CONFLICT,
    "worker_provider_refused": status.HTTP_409_CONFLICT,
    "plan_stale": status.HTTP_409_CONFLICT,
    "nothing_to_start": status.HTTP_409_CONFLICT,
    "unknown_pipeline": status.HTTP_404_NOT_FOUND,
    "runner_down": status.HTTP_409_CONFLICT,
    "pipeline_archive_refused": status.HTTP_409_CONFLICT,
}

# The field of a rescale request each refusal concerns (``field`` in the error body; the
# console shows the refusal on that field). The names are the request's own: ``changes`` for the
# fragment it names (a key of ``changes``), ``added_parallel_units``/``removed_parallel_units``
# for the PUs of its change. A refusal of several fields, or of none, has no ``field``.
FIELD_BY_CODE: dict[str, str] = {
    "unknown_fragment": "changes",
    "fragment_not_stateful": "changes",
    "fragment_busy": "changes",
    "unknown_parallel_unit": "added_parallel_units",
    "parallel_unit_on_dead_worker": "added_parallel_units",
    "parallel_unit_already_in_fragment": "added_parallel_units",
    "worker_not_active": "added_parallel_units",
    "worker_not_bootstrapped": "added_parallel_units",
    "parallel_unit_lost": "added_parallel_units",
    "parallel_unit_removed": "added_parallel_units",
    "parallel_unit_not_in_fragment": "removed_parallel_units",
    "removes_every_parallel_unit": "removed_parallel_units",
    "parallel_unit_added_and_removed": "removed_parallel_units",
    "nothing_to_do": "added_parallel_units",
}


def details_of(exc: rescale_errors.RescaleError) -> dict[str, Any]:
    """What a refusal's body says beside ``code`` and ``detail``, when it says more: a plan's
    refusal (``PlanError``) and a policy's (``rescaler.autoscaling.errors.PolicyInvalid``)
    name their field and what changed or is wrong."""
    details = getattr(exc, "details", None)
    return dict(details()) if callable(details) else {}


def field_of(exc: rescale_errors.RescaleError) -> str | None:
    """The request field a refusal concerns, if it is one: a refusal with details says its
    own."""
    details = details_of(exc)
    if "field" in details:
        return str(details["field"] or "") or None
    return FIELD_BY_CODE.get(exc.code)


# DRF's own codes renamed to the API's words.
RENAMED_CODES = {"parse_error": "malformed_request"}


class ApiError(exceptions.APIException):
    """A refusal raised by the API layer itself, with its code, reason and status."""

    def __init__(self, code: str, detail: str, status_code: int = 400) -> None:
        super().__init__(detail=detail, code=code)
        self.status_code = status_code
        self.error_code = code


def not_found(code: str, detail: str) -> ApiError:
    return ApiError(code, detail, status.HTTP_404_NOT_FOUND)


def pipeline_name(value: str) -> str:
    """A pipeline's name from a URL path, as text Postgres can compare (it refuses NUL
    characters): 404 ``unknown_pipeline`` for one with a NUL."""
    if "\x00" in value:
        raise not_found("unknown_pipeline", "no pipeline with a NUL character in its name")
    return value


def path_text(value: str, what: str) -> str:
    """A path segment as text Postgres can compare (it refuses NUL characters)."""
    if "\x00" in value:
        raise not_found(f"unknown_{what}", f"no {what} with a NUL character in its name")
    return value


def status_for(exc: rescale_errors.RescaleError) -> int:
    return STATUS_BY_CODE.get(exc.code, status.HTTP_400_BAD_REQUEST)


def _flatten(detail: Any) -> str:
    """One readable sentence out of DRF's nested validation messages."""
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_flatten(value)}" for key, value in detail.items())
    if isinstance(detail, list):
        return " ".join(_flatten(item) for item in detail)
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: the error body of every refusal, whatever raised it."""
    if isinstance(exc, rescale_errors.RescaleError):
        body: dict[str, Any] = {"code": exc.code, "detail": str(exc)}
        field = field_of(exc)
        if field:
            body["field"] = field
        body.update(details_of(exc))
        return Response(body, status=status_for(exc))
    if isinstance(exc, RequestDataTooBig):
        # Django's own refusal (a SuspiciousOperation), which it would answer with an HTML 400
        exc = ApiError(
            "request_too_large",
            f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes",
            status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response  # not a refusal: a bug, left for Django to report as one
    if isinstance(exc, ApiError):
        body = {"code": exc.error_code, "detail": str(exc.detail)}
    elif isinstance(exc, exceptions.ValidationError):
        errors = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        body = {"code": "invalid_parameters", "detail": _flatten(exc.detail), "errors": errors}
    else:
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        body = {"code": RENAMED_CODES.get(code, code), "detail": _flatten(exc.detail)}
    response.data = body
    return response


class ErrorSerializer(serializers.Serializer):
    """The body of every 4xx answer."""

    code = serializers.CharField(help_text="Stable, machine-readable reason (see docs/api.md).")
    detail = serializers.CharField(help_text="The reason in words.")
    # DRF's metaclass moves declared fields off the class: Serializer.errors is untouched
    errors = serializers.DictField(  # type: ignore[assignment]
        required=False,
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Only with code invalid_parameters (the messages per parameter) and "
        "invalid_policy (per setting of the autoscaling policy).",
    )
    field = serializers.CharField(
        required=False,
        help_text="The request field the refusal concerns, when it is one field: changes (the "
        "fragment), added_parallel_units, removed_parallel_units, plan_id; with "
        "invalid_policy, the first setting refused.",
    )
    changed = serializers.ListField(
        required=False,
        child=serializers.DictField(),
        help_text="Only with code plan_stale: what changed since the dry run, each with its "
        "`what` (used, expired, body, mapping_version, parallel_units) and the planned value "
        "against the one now (or sent).",
    )


_DESCRIPTIONS = {
    400: "Refused: the request cannot be carried out as written (see code).",
    401: "Not authenticated: send `Authorization: Token <key>` or log in.",
    403: "Authenticated, but not allowed (needs the operations.rescale permission).",
    404: "No such object, or a ?format= this endpoint does not offer.",
    406: "No representation in the accepted media type.",
    409: "Conflicts with the state of the cluster (fragment_busy, operation_final, "
    "worker_status_conflict, drain_empties_fragment, worker_provider_refused, plan_stale, "
    "nothing_to_start, runner_down).",
    413: "The body is larger than the API takes (request_too_large).",
    415: "Request body media type not supported (send application/json).",
}


def error_responses(*codes: int, media_type: str | None = None) -> dict[Any, OpenApiResponse]:
    """The documented error answers of an endpoint, each with the error body (in
    ``media_type`` only, when the endpoint's other renderers never render errors)."""
    return {
        (code if media_type is None else (code, media_type)): OpenApiResponse(
            response=ErrorSerializer, description=_DESCRIPTIONS[code]
        )
        for code in codes
    }
