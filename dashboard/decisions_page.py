"""The history page's second table: the autoscaler's decisions, next to the operations they
started, filtered exactly as ``GET /api/v1/pipelines/<name>/autoscaling/decisions`` filters
(the same FilterSet, ``DecisionFilter``, its fields prefixed ``decisions-`` on this page; the
pipeline, which is the API's path, is ``decisions-pipeline``), 50 to a page, sorted by any
column with ``?decisions-sort=``. Its CSV is the API's, per pipeline, with the same filters
(``csv_urls``)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, QueryDict
from django.urls import reverse
from django_tables2 import RequestConfig

from dashboard.api.filters import DecisionFilter
from dashboard.forms import filter_params
from dashboard.tables import DecisionTable
from rescaler.autoscaling.decisions import decision_list, decision_pipelines
from rescaler.autoscaling.errors import UnknownPipeline
from rescaler.autoscaling.model import DecisionKind, Mode
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.autoscaling.selectors import pipeline_get

DECISIONS_PER_PAGE = 50
PREFIX = "decisions"


def decisions_section(request: HttpRequest) -> dict[str, Any]:
    """The context of the decisions' table: the decisions its filters match, newest first; a
    refused filter is said, and no decision is listed rather than all of them."""
    times = tuple(f"{PREFIX}-{name}" for name in ("decided_after", "decided_before"))
    params = filter_params(request.GET, times)
    pipeline = params.get(f"{PREFIX}-pipeline")
    errors: dict[str, Any] = {}
    try:
        rows = decision_list(pipeline=pipeline_get(name=pipeline) if pipeline else None)
    except UnknownPipeline as unknown:
        errors["pipeline"] = [str(unknown)]
        rows = decision_list()
    filterset = DecisionFilter(params, queryset=rows, prefix=PREFIX)
    if not filterset.is_valid():
        errors.update(filterset.errors)
    rows = decision_list().none() if errors else filterset.qs
    table = DecisionTable(rows)
    RequestConfig(request, paginate={"per_page": DECISIONS_PER_PAGE}).configure(table)
    pipelines = decision_pipelines()
    return {
        "decisions": table,
        "decisions_errors": errors,
        "decisions_current": {
            name: request.GET.get(f"{PREFIX}-{name}")
            for name in ("pipeline", *DecisionFilter.base_filters)
        },
        "decision_pipelines": pipelines,
        "decisions_csv": {} if errors else csv_urls(params, [pipeline] if pipeline else pipelines),
        "decision_kinds": [k.value for k in DecisionKind],
        "decision_modes": [m.value for m in Mode],
        "decision_outcomes": [value for value, _ in AutoscalingDecision.Outcome.choices],
    }


def csv_urls(params: QueryDict, pipelines: list[str]) -> dict[str, str]:
    """Per pipeline, the API's CSV of the decisions the page's filters match: the same filters,
    without the page's prefix (``GET .../autoscaling/decisions?format=csv&kind=scale``)."""
    query = QueryDict(mutable=True)
    query["format"] = "csv"
    for name in DecisionFilter.base_filters:
        values = params.getlist(f"{PREFIX}-{name}")
        if values:
            query.setlist(name, values)
    return {
        name: reverse("api:pipeline-autoscaling-decisions", kwargs={"name": name})
        + f"?{query.urlencode()}"
        for name in pipelines
    }
