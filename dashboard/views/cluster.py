"""The cluster page (``/``) and its live partials: component health, the fragment × PU
matrix, the workers (with their actions, for those allowed) and the running operations. Its
forms post to ``worker_actions`` and ``pipeline_actions``, which render the page again with a
refusal (``render_home``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django_tables2 import RequestConfig

from dashboard.api.permissions import POLICY_PERMISSION, RESCALE_PERMISSION
from dashboard.api.selectors.cluster import cluster_info
from dashboard.api.selectors.operations import operation_list
from dashboard.autoscaling_page import AutoscalingPolicyForm, autoscaling_panels
from dashboard.cluster_tables import ComponentTable, PastVersionTable, RunningOperationTable
from dashboard.cluster_workers import WorkerRow, worker_rows
from dashboard.epochs import epoch_series, last_epoch
from dashboard.format import vnode_ranges
from dashboard.forms import WORKER_ACTIONS, AddWorkerForm
from dashboard.key_finder import key_finder
from dashboard.matrix import METRICS, cluster_matrix, matrix_view
from dashboard.past_placement import past_view, placement_matrix
from dashboard.tables import WorkerTable
from dashboard.views.site import component_rows, health_body
from rescaler.runner.workers import CORES_MAX, CORES_MIN
from workers.rescale.protocol import FINAL


def open_worker_action(
    request: HttpRequest,
    rows: tuple[WorkerRow, ...],
    *,
    action: str | None,
    name: str | None,
    form: forms.Form | None = None,
) -> dict[str, Any] | None:
    """The worker action the page has open (``?act=drain&on=local-0``, or a refused post):
    its words, and its form. None when the user may not act or the worker's status does not
    offer it (the service would refuse it anyway)."""
    if not request.user.has_perm(RESCALE_PERMISSION) or action not in WORKER_ACTIONS:
        return None
    row = next((r for r in rows if r.name == name), None)
    if row is None:
        return None
    offered = {"cordon": row.can_cordon, "uncordon": row.can_uncordon, "drain": row.can_drain}
    if form is None and not offered[action]:
        return None
    words = WORKER_ACTIONS[action]
    fill = {"worker": row.name, "pus": vnode_ranges(row.parallel_units)}
    return {
        "action": action,
        "worker": row.name,
        "title": words["title"].format(**fill),
        "what": words["what"].format(**fill),
        "button": words["button"].format(**fill),
        "destructive": action == "drain",
        "form": form or words["form"](),
    }


def _cluster_context(
    request: HttpRequest,
    *,
    action: dict[str, Any] | None = None,
    add_form: AddWorkerForm | None = None,
) -> dict[str, Any]:
    """The cluster page's live part from one ``cluster_info()``: the matrix as the query string
    asks for it (metric, by PU or worker, a selected cell), the workers table, the running
    operations and the last epoch; the matrix as of the past the query string asks for
    (``dashboard.past_placement``), if it does. Whether the user may act on workers decides only which
    forms are drawn: the services refuse the action itself."""
    cluster = cluster_info()
    past = past_view(request.GET)
    if past is not None and past.placement is not None:
        matrix = placement_matrix(cluster, past.placement)
    else:
        matrix = cluster_matrix(cluster)
    rows = worker_rows(cluster)
    can_act = request.user.has_perm(RESCALE_PERMISSION)
    workers = WorkerTable(rows, exclude=() if can_act else ("actions",))
    RequestConfig(request, paginate=False).configure(workers)
    pipelines = [p["name"] for p in cluster["pipelines"]]
    query = request.GET
    running = operation_list().exclude(status__in=FINAL)[:20]  # read once, if drawn
    past_versions = None
    if past is not None and past.placement is not None:
        past_versions = PastVersionTable(past.rows)  # its links keep the query string
        RequestConfig(request, paginate=False).configure(past_versions)
    return {
        "matrix": matrix_view(
            matrix,
            metric=query.get("metric"),
            by=query.get("by"),
            worker=query.get("worker"),
            cell=query.get("cell"),
        ),
        "metrics": METRICS[:1] if matrix.past else METRICS,
        "past": past,
        "past_versions": past_versions,
        "cluster": cluster,
        "workers_table": workers,
        "can_act": can_act,
        "can_set_policy": request.user.has_perm(POLICY_PERMISSION),
        "cores_min": CORES_MIN,
        "cores_max": CORES_MAX,
        "add_form": add_form or AddWorkerForm(),
        "worker_action": action
        or open_worker_action(request, rows, action=query.get("act"), name=query.get("on")),
        "running": running,
        "running_table": RunningOperationTable(running),
        "last_epoch": last_epoch(pipelines[0] if pipelines else None),
        "key_fragments": [row.fragment for row in matrix.rows],
        "epochs_pipeline": pipelines[0] if pipelines else None,
    }


def render_home(
    request: HttpRequest,
    status: int = 200,
    autoscaling_forms: dict[str, AutoscalingPolicyForm] | None = None,
    **forms_: Any,
) -> HttpResponse:
    context = _cluster_context(request, **forms_)
    if context["past"] is not None and context["past"].error and status == 200:
        status = 400  # the past asked cannot be shown: the page says why, over the live matrix
    ok, body = health_body()
    pipeline = context["epochs_pipeline"]
    return render(
        request,
        "dashboard/cluster.html",
        {
            **context,
            "health": body,
            "all_up": ok,
            "components": ComponentTable(component_rows(body["components"])),
            "epochs": epoch_series(pipeline=pipeline) if pipeline else None,
            "finder": key_finder(request.GET, context["key_fragments"]),
            "autoscaling": autoscaling_panels(
                user=request.user,
                pipelines=[p["name"] for p in context["cluster"]["pipelines"]],
                can_act=context["can_act"],
                bound=autoscaling_forms,
            ),
        },
        status=status,
    )


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The cluster page: component health, the fragment × PU matrix, the workers (with their
    actions, for those allowed) and running operations, complete without JavaScript. Live, the
    page re-reads its live part (``cluster_partial``) after the events of ``ws/cluster/``."""
    return render_home(request)


@never_cache
@login_required
@require_GET
def matrix_partial(request: HttpRequest) -> HttpResponse:
    """The matrix alone."""
    return render(request, "dashboard/partials/matrix.html", _cluster_context(request))


@never_cache
@login_required
@require_GET
def cluster_partial(request: HttpRequest) -> HttpResponse:
    """The cluster page's live part (the last epoch, the matrix, the workers table and the
    running operations) as the same query string shows it, re-read by the page (htmx) when the
    cluster changes: one query of the cluster for all, so they never show two moments."""
    return render(request, "dashboard/partials/cluster.html", _cluster_context(request))


@never_cache
@login_required
@require_GET
def health_partial(request: HttpRequest) -> HttpResponse:
    """The components' health, re-read by the cluster page every 10 s."""
    ok, body = health_body()
    return render(
        request,
        "dashboard/partials/health.html",
        {
            "health": body,
            "all_up": ok,
            "components": ComponentTable(component_rows(body["components"])),
        },
    )
