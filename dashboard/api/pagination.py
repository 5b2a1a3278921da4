"""Page-number pagination with a caller-chosen page size (``?page=2&page_size=100``)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request


class Pagination(PageNumberPagination):
    """DRF's pagination, except that a ``page_size`` outside 1..500 (or not a whole number) is
    refused with 400 ``invalid_parameters``: DRF would silently answer 50 rows to ``abc``, ``0``
    or ``-1`` and 500 to ``100000``, so a client that asked for more than it got would believe
    it had everything."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= self.max_page_size):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"must be a whole number from 1 to {self.max_page_size}, not {raw[:20]!r}"
                    ]
                }
            )
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """DRF's parameters with their ranges, so the schema says what the code refuses."""
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
            elif parameter["name"] == self.page_query_param:
                parameter["schema"].update(minimum=1)
        return parameters
