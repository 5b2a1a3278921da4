"""The history page (``/operations/``): every operation, filtered as the API filters them, and
the autoscaler's decisions beside them."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django_tables2 import RequestConfig

from dashboard.api.filters import OperationFilter
from dashboard.api.selectors.operations import operation_list
from dashboard.decisions_page import decisions_section
from dashboard.forms import filter_params
from dashboard.tables import HistoryTable
from workers.rescale.protocol import OperationStatus, Strategy

HISTORY_PER_PAGE = 50


@login_required
@require_GET
def history_page(request: HttpRequest) -> HttpResponse:
    """Every operation, newest first, filtered exactly as ``GET /api/v1/operations`` filters
    (the same FilterSet), 50 to a page, sorted by any column with ``?sort=``; beside them the
    autoscaler's decisions (``decisions_section``)."""
    params = filter_params(request.GET, ("created_after", "created_before"))
    filterset = OperationFilter(params, queryset=operation_list())
    errors = {} if filterset.is_valid() else filterset.errors
    operations = filterset.qs if not errors else operation_list().none()
    table = HistoryTable(operations)
    RequestConfig(request, paginate={"per_page": HISTORY_PER_PAGE}).configure(table)
    for name in ("page", "sort"):
        params.pop(name, None)
    return render(
        request,
        "dashboard/history.html",
        {
            "table": table,
            "errors": errors,
            "current": {k: request.GET.get(k) for k in OperationFilter.base_filters},
            "query": params.urlencode(),
            "statuses": [s.value for s in OperationStatus],
            "strategies": [s.value for s in Strategy],
            **decisions_section(request),
        },
    )
