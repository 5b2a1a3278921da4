"""Lists as CSV (``GET /api/v1/audit?format=csv``, ``GET /api/v1/operations?format=csv``,
``GET /api/v1/pipelines/<name>/autoscaling/decisions?format=csv``): every matching row,
streamed, never paginated; refusals stay JSON."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from rest_framework import generics
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.operations.models import RescaleOperation

AUDIT_COLUMNS = ("id", "at", "actor_name", "action", "object_type", "object_id", "before", "after")
OPERATION_COLUMNS = (
    "operation_id", "pipeline", "fragments", "strategy", "status", "requested_by", "reason",
    "created_at", "started_at", "finished_at", "duration_s", "vnodes_moved", "keys_moved",
    "bytes_moved", "outcome", "error_code",
)  # fmt: skip
DECISION_COLUMNS = (
    "id", "pipeline", "decided_at", "mode", "kind", "parallel_units", "outcome",
    "outcome_reason", "error_code", "outcome_at", "applied_by", "plan_id", "operation_id",
    "operation_status", "workers_requested", "workers_requested_at", "workers_released",
    "reasons", "missing_signals", "fragments", "request",
)  # fmt: skip
# rows read from Postgres per round trip: any number of rows in bounded memory
CHUNK_ROWS = 2000
# A text cell starting with one of these is a formula to a spreadsheet (CSV injection), also
# after leading blanks (some spreadsheets strip them) and in the full-width forms some read as
# the ASCII ones; such a cell is written with a leading apostrophe, which spreadsheets show as
# text and do not display. Numbers are written as they are (-3 is a number, not a formula).
FORMULA_STARTS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
BLANKS = " \t\r\n"


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # raw: a spreadsheet reads it as the number it is
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, separators=(",", ":"))
    text = str(value)
    if text.startswith(tuple(BLANKS)) or text.lstrip(BLANKS).startswith(FORMULA_STARTS):
        return "'" + text
    return text


def csv_lines(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(list(header))
    for row in rows:
        yield writer.writerow([_cell(v) for v in row])


def audit_rows(queryset: QuerySet[AuditEvent]) -> Iterator[list[Any]]:
    """The events' ``AUDIT_COLUMNS``, read from Postgres in chunks."""
    rows = queryset.values_list(*AUDIT_COLUMNS)
    return ([i, at.isoformat(), *rest] for i, at, *rest in rows.iterator(chunk_size=CHUNK_ROWS))


def _time(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def operation_rows(queryset: QuerySet[RescaleOperation]) -> Iterator[list[Any]]:
    """The operations' ``OPERATION_COLUMNS``, read from Postgres in chunks (as instances, so
    ``duration_s`` is the model's own, as the JSON list shows it)."""
    for op in queryset.iterator(chunk_size=CHUNK_ROWS):
        yield [
            op.operation_id, op.pipeline.name, op.fragments, op.strategy, op.status,
            op.requested_by.get_username() if op.requested_by else None, op.reason,
            _time(op.created_at), _time(op.started_at), _time(op.finished_at), op.duration_s,
            op.vnodes_moved, op.keys_moved, op.bytes_moved, op.outcome, op.error_code,
        ]  # fmt: skip


def _parallel_units(fragments: list[dict[str, Any]]) -> str:
    """Each fragment's PUs now and after, as the console prints them: ``word_count 2 → 3``."""
    return ", ".join(
        f"{f['fragment']} {f['parallel_units_now']} → {f['parallel_units_after']}"
        for f in fragments
    )


def decision_rows(queryset: QuerySet[AutoscalingDecision]) -> Iterator[list[Any]]:
    """The decisions' ``DECISION_COLUMNS``, read from Postgres in chunks (``reasons``,
    ``missing_signals``, ``fragments`` with their signals, and ``request`` as JSON)."""
    for row in queryset.iterator(chunk_size=CHUNK_ROWS):
        op = row.operation
        yield [
            row.pk, row.pipeline.name, _time(row.decided_at), row.mode, row.kind,
            _parallel_units(row.fragments), row.outcome, row.outcome_reason, row.error_code,
            _time(row.outcome_at), row.applied_by.get_username() if row.applied_by else None,
            row.plan_id, op.operation_id if op else None, op.status if op else None,
            row.workers_requested, _time(row.workers_requested_at), row.workers_released,
            row.reasons, row.missing_signals, row.fragments, row.request,
        ]  # fmt: skip


class CSVRenderer(BaseRenderer):
    """Negotiates ``text/csv`` (``?format=csv``); renders what is not streamed (an error body)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if data is None:
            return b""
        if isinstance(data, dict):
            return "".join(csv_lines(data.keys(), [data.values()])).encode("utf-8")
        view = (renderer_context or {}).get("view")
        return "".join(csv_lines(getattr(view, "csv_columns", ()), [])).encode("utf-8")


class CSVListView(generics.ListAPIView):
    """A list that is JSON pages, or with ``?format=csv`` (``Accept: text/csv``) every row that
    the same filters match, streamed as ``csv_filename``. A refusal is JSON whatever was asked
    for: a client parses ``{"code", "detail"}`` one way."""

    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]
    csv_filename: str
    csv_columns: tuple[str, ...]

    def csv_rows(self, queryset: Any) -> Iterable[Iterable[Any]]:
        raise NotImplementedError

    def csv_name(self) -> str:
        """The file's name (``Content-Disposition``)."""
        return self.csv_filename

    def get_renderers(self) -> list[BaseRenderer]:
        """CSV is a representation of the list only: a POST to the same URL (operations) never
        answers CSV, and ``?format=csv`` there is a 404 like any format not offered."""
        renderers = super().get_renderers()
        request = getattr(self, "request", None)
        if request is None or request.method in ("GET", "HEAD"):
            return renderers
        return [r for r in renderers if not isinstance(r, CSVRenderer)]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if request.accepted_renderer.format != "csv":
            return super().list(request, *args, **kwargs)
        rows = self.csv_rows(self.filter_queryset(self.get_queryset()))
        response = StreamingHttpResponse(csv_lines(self.csv_columns, rows), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="{self.csv_name()}"'
        return response

    def handle_exception(self, exc: Exception) -> Response:
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)
