"""The console's Audit page (NetBox's changelog): every audited event, filtered exactly as
``GET /api/v1/audit`` filters (the same FilterSet, ``AuditFilter``), 50 to a page, sorted by
any column with ``?sort=``; its CSV is the API's, with the same query string."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET
from django_tables2 import RequestConfig

from dashboard.api.filters import AuditFilter
from dashboard.api.selectors.operations import audit_list
from dashboard.forms import filter_params
from dashboard.tables import AuditTable
from rescaler.cluster.models import Pipeline
from workers.rescale.protocol import AuditObject

AUDIT_PER_PAGE = 50
TIMES = ("at_after", "at_before")


@login_required
@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    """The audit events the filters match, newest first; a refused filter is said, and no
    event is listed rather than all of them."""
    params = filter_params(request.GET, TIMES)
    filterset = AuditFilter(params, queryset=audit_list())
    errors = {} if filterset.is_valid() else filterset.errors
    events = audit_list().none() if errors else filterset.qs
    table = AuditTable(events)
    RequestConfig(request, paginate={"per_page": AUDIT_PER_PAGE}).configure(table)
    for name in ("page", "sort"):
        params.pop(name, None)
    query = params.urlencode()
    return render(
        request,
        "dashboard/audit.html",
        {
            "table": table,
            "errors": errors,
            "current": {k: request.GET.get(k) for k in AuditFilter.base_filters},
            "csv_url": f"{reverse('api:audit')}?format=csv" + (f"&{query}" if query else ""),
            "kinds": [kind.value for kind in AuditObject],
            "pipelines": list(Pipeline.objects.order_by("name").values_list("name", flat=True)),
        },
    )
