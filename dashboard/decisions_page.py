"""The history page's second table: the autoscaler's decisions, next to the operations they
started, filtered exactly as ``GET /api/v1/pipelines/<name>/autoscaling/decisions`` filters
(the same FilterSet, ``DecisionFilter``, its fields prefixed ``decisions-`` on this page),
50 to a page, sorted by any column with ``?decisions-sort=``."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django_tables2 import RequestConfig

from dashboard.api.filters import DecisionFilter
from dashboard.forms import filter_params
from dashboard.tables import DecisionTable
from rescaler.autoscaling.decisions import decision_list
from rescaler.autoscaling.model import DecisionKind, Mode
from rescaler.autoscaling.models import AutoscalingDecision

DECISIONS_PER_PAGE = 50
PREFIX = "decisions"


def decisions_section(request: HttpRequest) -> dict[str, Any]:
    """The context of the decisions' table: the decisions its filters match, newest first; a
    refused filter is said, and no decision is listed rather than all of them."""
    times = tuple(f"{PREFIX}-{name}" for name in ("decided_after", "decided_before"))
    params = filter_params(request.GET, times)
    filterset = DecisionFilter(params, queryset=decision_list(), prefix=PREFIX)
    errors = {} if filterset.is_valid() else filterset.errors
    rows = decision_list().none() if errors else filterset.qs
    table = DecisionTable(rows)
    RequestConfig(request, paginate={"per_page": DECISIONS_PER_PAGE}).configure(table)
    return {
        "decisions": table,
        "decisions_errors": errors,
        "decisions_current": {
            name: request.GET.get(f"{PREFIX}-{name}") for name in DecisionFilter.base_filters
        },
        "decision_kinds": [k.value for k in DecisionKind],
        "decision_modes": [m.value for m in Mode],
        "decision_outcomes": [value for value, _ in AutoscalingDecision.Outcome.choices],
    }
