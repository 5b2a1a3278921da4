"""The audit log as CSV (``GET /api/v1/audit?format=csv``): every matching event, streamed."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.db.models import QuerySet
from rest_framework.renderers import BaseRenderer

from rescaler.operations.models import AuditEvent

AUDIT_COLUMNS = ("id", "at", "actor_name", "action", "object_type", "object_id", "before", "after")
# A cell starting with one of these is a formula to a spreadsheet (CSV injection); such a cell is
# written with a leading apostrophe, which spreadsheets show as text and do not display.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    def write(self, value: str) -> str:
        return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True, separators=(",", ":"))
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_lines(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(list(header))
    for row in rows:
        yield writer.writerow([_cell(v) for v in row])


def audit_csv(queryset: QuerySet[AuditEvent]) -> Iterator[str]:
    """The events as CSV lines, read from Postgres in chunks (any number of events)."""
    rows = queryset.values_list(
        "id", "at", "actor_name", "action", "object_type", "object_id", "before", "after"
    )
    return csv_lines(
        AUDIT_COLUMNS,
        ([i, at.isoformat(), *rest] for i, at, *rest in rows.iterator(chunk_size=2000)),
    )


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
        return "".join(csv_lines(AUDIT_COLUMNS, [])).encode("utf-8")
