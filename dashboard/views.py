"""HTTP views of the dashboard: thin, each calls a service and renders its result."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_tables2 import RequestConfig

from dashboard.api.errors import status_for
from dashboard.api.filters import OperationFilter
from dashboard.api.permissions import POLICY_PERMISSION, RESCALE_PERMISSION
from dashboard.api.selectors import cluster_info, operation_list
from dashboard.api.serializers import DryRunSerializer
from dashboard.autoscaling_page import AutoscalingPolicyForm, autoscaling_panels
from dashboard.autoscaling_page import auto_id as autoscaling_auto_id
from dashboard.cluster_workers import WorkerRow, worker_rows
from dashboard.decisions_page import decisions_section
from dashboard.epochs import epoch_series, last_epoch
from dashboard.format import vnode_ranges
from dashboard.forms import WORKER_ACTIONS, AddWorkerForm, CancelForm, filter_params
from dashboard.key_finder import key_finder
from dashboard.live import step_ranges
from dashboard.matrix import METRICS, cluster_matrix, matrix_view
from dashboard.operation_page import operation_for_page
from dashboard.operation_page import page_context as operation_page_context
from dashboard.rescale_page import CUSTOM, RescaleForm, plan_view
from dashboard.tables import HistoryTable, StepTable, WorkerTable
from rescaler.autoscaling.errors import PolicyInvalid
from rescaler.autoscaling.recommendation import recommendation_apply
from rescaler.autoscaling.services import autoscaling_policy_update
from rescaler.health import down_components, public_components, system_health
from rescaler.operations import plans
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.models import OperationPlan, RescaleOperation, RescaleStep
from rescaler.operations.pipeline_archive import pipeline_archive
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import parallel_units_closed_to_vnodes
from rescaler.runner import workers as worker_services
from rescaler.runner.workers import CORES_MAX, CORES_MIN
from workers.rescale.errors import RescaleError
from workers.rescale.protocol import FINAL, OperationStatus, Strategy

STEPS_PER_PAGE = 100
HISTORY_PER_PAGE = 50


def _health_body() -> tuple[bool, dict[str, Any]]:
    ok, components = system_health()
    down = down_components(components)
    return ok, {"status": "ok" if ok else "down", "down": down, "components": components}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every component is up, else 503 with the names of those down in ``down``.

    Public on purpose: load balancers, compose healthchecks and scripts/dev poll it unauthenticated.
    But the details name internal hosts, databases and workers: a caller who is not signed in
    gets only the statuses, unless ``RESCALER_PUBLIC_HEALTH_DETAILS`` says otherwise.
    """
    ok, body = _health_body()
    if not (request.user.is_authenticated or settings.RESCALER_PUBLIC_HEALTH_DETAILS):
        body["components"] = public_components(body["components"])
        body["details"] = "sign in to see each component's details and errors"
    return JsonResponse(body, status=200 if ok else 503)


def _display(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value) or "none"
    return str(value)


def _component_rows(components: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "status": component["status"],
            "details": [
                (key, _display(value))
                for key, value in component.items()
                if key not in ("status", "error")
            ],
            "error": component.get("error"),
        }
        for name, component in components.items()
    ]


def _worker_action(
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
    operations and the last epoch. Whether the user may act on workers decides only which
    forms are drawn: the services refuse the action itself."""
    cluster = cluster_info()
    matrix = cluster_matrix(cluster)
    rows = worker_rows(cluster)
    can_act = request.user.has_perm(RESCALE_PERMISSION)
    workers = WorkerTable(rows, exclude=() if can_act else ("actions",))
    RequestConfig(request, paginate=False).configure(workers)
    pipelines = [p["name"] for p in cluster["pipelines"]]
    query = request.GET
    return {
        "matrix": matrix_view(
            matrix,
            metric=query.get("metric"),
            by=query.get("by"),
            worker=query.get("worker"),
            cell=query.get("cell"),
        ),
        "metrics": METRICS,
        "cluster": cluster,
        "workers_table": workers,
        "can_act": can_act,
        "can_set_policy": request.user.has_perm(POLICY_PERMISSION),
        "cores_min": CORES_MIN,
        "cores_max": CORES_MAX,
        "add_form": add_form or AddWorkerForm(),
        "worker_action": action
        or _worker_action(request, rows, action=query.get("act"), name=query.get("on")),
        "running": operation_list().exclude(status__in=FINAL)[:20],
        "last_epoch": last_epoch(pipelines[0] if pipelines else None),
        "key_fragments": [row.fragment for row in matrix.rows],
        "epochs_pipeline": pipelines[0] if pipelines else None,
    }


def _render_home(
    request: HttpRequest,
    status: int = 200,
    autoscaling_forms: dict[str, AutoscalingPolicyForm] | None = None,
    **forms_: Any,
) -> HttpResponse:
    context = _cluster_context(request, **forms_)
    ok, body = _health_body()
    pipeline = context["epochs_pipeline"]
    return render(
        request,
        "dashboard/cluster.html",
        {
            **context,
            "health": body,
            "all_up": ok,
            "components": _component_rows(body["components"]),
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
    return _render_home(request)


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
    ok, body = _health_body()
    return render(
        request,
        "dashboard/partials/health.html",
        {"health": body, "all_up": ok, "components": _component_rows(body["components"])},
    )


@login_required
@require_POST
def worker_add_view(request: HttpRequest) -> HttpResponse:
    """The page's "add worker" form: the service the API calls (``worker_add``), its refusal
    on the form; then back to the cluster page."""
    if not request.user.has_perm(RESCALE_PERMISSION):
        raise PermissionDenied("adding a worker needs the permission operations.rescale")
    form = AddWorkerForm(request.POST)
    if form.is_valid():
        try:
            added = worker_services.worker_add(user=request.user, cores=form.cleaned_data["cores"])
        except RescaleError as refused:
            form.add_error(None, f"{refused.code}: {refused}")
        else:
            messages.success(request, f"Asked {added.provider} for a worker: {added.answer}")
            return redirect("dashboard:home")
    return _render_home(request, status=400, add_form=form)


WORKER_SERVICES: dict[str, Any] = {
    "cordon": worker_services.worker_cordon,
    "uncordon": worker_services.worker_uncordon,
    "drain": worker_services.worker_drain,
}


@login_required
@require_POST
def worker_action_view(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Cordon, uncordon or drain one worker from its form: the services the API calls, their
    refusals on the form, then back to the cluster page with what was done."""
    if action not in WORKER_SERVICES:
        raise Http404(f"no worker action {action!r}")
    if not request.user.has_perm(RESCALE_PERMISSION):
        raise PermissionDenied("worker actions need the permission operations.rescale")
    form = WORKER_ACTIONS[action]["form"](request.POST)
    if form.is_valid():
        try:
            done = WORKER_SERVICES[action](
                user=request.user, name=name, reason=form.cleaned_data["reason"]
            )
        except RescaleError as refused:
            form.add_error(None, f"{refused.code}: {refused}")
        else:
            said = WORKER_ACTIONS[action]["done"].format(worker=name)
            operation = getattr(done, "operation", None)
            if operation is not None:
                said += f" Operation {operation.operation_id} moves its vnodes."
            messages.success(request, said)
            return redirect("dashboard:home")
    rows = worker_rows(cluster_info())
    opened = _worker_action(request, rows, action=action, name=name, form=form)
    return _render_home(request, status=400, action=opened)


@login_required
@require_POST
def autoscaling_policy_view(request: HttpRequest, name: str) -> HttpResponse:
    """The autoscaling panel's policy form: the service the API calls
    (``autoscaling_policy_update``), its refusals on the form's fields; then back to the panel."""
    if not request.user.has_perm(POLICY_PERMISSION):
        raise PermissionDenied(
            f"changing an autoscaling policy needs the permission {POLICY_PERMISSION}"
        )
    form = AutoscalingPolicyForm(request.POST, auto_id=autoscaling_auto_id(name))
    if form.is_valid():
        try:
            autoscaling_policy_update(user=request.user, pipeline=name, changes=form.cleaned_data)
        except PolicyInvalid as refused:
            for field, why in refused.problems.items():
                form.add_error(field if field in form.fields else None, why)
        except RescaleError as refused:
            form.add_error(None, f"{refused.code}: {refused}")
        else:
            messages.success(request, f"Saved the autoscaling policy of {name}.")
            return redirect(f"{reverse('dashboard:home')}#autoscaling-{name}")
    return _render_home(request, status=400, autoscaling_forms={name: form})


@login_required
@require_POST
def autoscaling_apply_view(request: HttpRequest, name: str) -> HttpResponse:
    """ "Apply" on the recommendation: start its bound plan (``recommendation_apply``), then the
    operation's page; a refusal (the plan went stale, a fragment is busy) back on the panel."""
    if not request.user.has_perm(RESCALE_PERMISSION):
        raise PermissionDenied("starting a rescale needs the permission operations.rescale")
    try:
        op = recommendation_apply(
            user=request.user, pipeline=name, plan_id=request.POST.get("plan_id", "")
        )
    except RescaleError as refused:
        messages.error(request, f"{refused.code}: {refused}")
        return redirect(f"{reverse('dashboard:home')}#autoscaling-{name}")
    messages.success(request, f"Started operation {op.operation_id}: the recommended plan.")
    return redirect("dashboard:operation", operation_id=op.operation_id)


@login_required
@require_POST
def pipeline_archive_view(request: HttpRequest, name: str) -> HttpResponse:
    """Archive a pipeline no runner reports for (``rescaler.operations.pipeline_archive``), then back to
    the cluster page with what was done or why not."""
    if not request.user.has_perm(RESCALE_PERMISSION):
        raise PermissionDenied("archiving a pipeline needs the permission operations.rescale")
    try:
        pipeline_archive(user=request.user, name=name, reason=request.POST.get("reason", ""))
    except RescaleError as refused:
        messages.error(request, f"{refused.code}: {refused}")
    else:
        messages.success(
            request,
            f"Archived pipeline {name}: its runner registering again brings it back.",
        )
    return redirect("dashboard:home")


def _operation_or_404(operation_id: str) -> RescaleOperation:
    op = operation_for_page(operation_id=operation_id)
    if op is None:
        raise Http404(f"no operation {operation_id!r}")
    return op


def _operation_live_context(
    request: HttpRequest, op: RescaleOperation, cancel_form: CancelForm | None = None
) -> dict[str, Any]:
    """The live part of the operation page: its head, placement, vnodes, steps (a sortable,
    paginated table), timeline, and the cancel form for those allowed."""
    steps = StepTable(RescaleStep.objects.filter(operation=op))
    RequestConfig(request, paginate={"per_page": STEPS_PER_PAGE}).configure(steps)
    return {
        **operation_page_context(op),
        "steps_table": steps,
        "can_cancel": request.user.has_perm(RESCALE_PERMISSION),
        "cancel_form": cancel_form or CancelForm(),
    }


def _render_operation(
    request: HttpRequest, op: RescaleOperation, cancel_form: CancelForm | None = None
) -> HttpResponse:
    context = _operation_live_context(request, op, cancel_form)
    if request.headers.get("HX-Target") == "operation-live":
        # the page re-reads its live part (the server saw it miss a version, or an event
        # that changes the whole page): the same template, without the page around it
        response = render(request, "dashboard/operation/live.html", context)
    else:
        response = _render_operation_page(request, op, context, cancel_form)
    # one URL, two answers: a cache (the browser's back button) must not mix them up
    patch_vary_headers(response, ("HX-Request", "HX-Target"))
    return response


def _socket_path(op: RescaleOperation, steps: StepTable) -> str:
    """The operation page's socket: from the version the page holds, for the step rows it
    shows (the consumer renders only those)."""
    shown = step_ranges([row.record.step for row in steps.paginated_rows])
    return f"/ws/operations/{op.operation_id}/page/?version={op.progress_version}&steps={shown}"


def _render_operation_page(
    request: HttpRequest,
    op: RescaleOperation,
    context: dict[str, Any],
    cancel_form: CancelForm | None,
) -> HttpResponse:
    return render(
        request,
        "dashboard/operation.html",
        {
            **context,
            "socket_path": _socket_path(op, context["steps_table"]),
            "key_fragments": op.fragments,
            "finder": key_finder(request.GET, list(op.fragments)),
            # the epochs around the operation: a minute before it began to a minute after it ended
            "epochs": epoch_series(
                pipeline=op.pipeline.name,
                since=(op.started_at or op.created_at) - dt.timedelta(minutes=1),
                until=op.finished_at + dt.timedelta(minutes=1) if op.finished_at else None,
            ),
            "span_start": (op.started_at or op.created_at).timestamp(),
            "span_end": op.finished_at.timestamp() if op.finished_at else None,
        },
        status=400 if cancel_form is not None and cancel_form.errors else 200,
    )


@login_required
@require_GET
def operation_page(request: HttpRequest, operation_id: str) -> HttpResponse:
    """One operation: its head (planned against moved, what it waits for), placement, vnodes
    by phase, steps and timeline, all rendered here (complete without JavaScript). Live, the
    websocket ``/ws/operations/<id>/page/`` brings each progress event as rendered rows."""
    return _render_operation(request, _operation_or_404(operation_id))


@login_required
@require_POST
def operation_cancel_view(request: HttpRequest, operation_id: str) -> HttpResponse:
    """The page's cancel form: the service the API's cancel calls, the same refusals, shown on
    the form; then back to the operation (a redirect, so a reload does not post again)."""
    op = _operation_or_404(operation_id)
    if not request.user.has_perm(RESCALE_PERMISSION):
        raise PermissionDenied("cancelling needs the permission operations.rescale")
    form = CancelForm(request.POST)
    if form.is_valid():
        try:
            operation_cancel(user=request.user, operation=op)
        except RescaleError as refused:
            form.add_error(None, str(refused))
    if form.errors:
        return _render_operation(request, _operation_or_404(operation_id), form)
    return redirect("dashboard:operation", operation_id=op.operation_id)


@login_required
@require_http_methods(["GET", "POST"])
def rescale_page(request: HttpRequest) -> HttpResponse:
    """Pick a fragment and its new PUs, preview the plan (a dry run), then start exactly it (its
    ``plan_id``): a Django form whose body is the API's request, given to the service the API
    calls, so the page has no rules of its own and its refusals land on their fields."""
    cluster = cluster_info()
    running = {p["name"] for p in cluster["pipelines"] if p["runner_alive"]}
    # a running pipeline's fragments first, so that the form opens on one of them; a pipeline
    # no runner reports for (an earlier run's state directory) is listed, marked, after them
    fragments = sorted(
        (f for f in cluster["fragments"] if f["kind"] == "stateful"),
        key=lambda f: f["pipeline"] not in running,
    )
    columns = cluster_matrix(cluster).columns
    closed_pus = parallel_units_closed_to_vnodes()
    open_pus = {c.pu for c in columns} - set(closed_pus)
    can_rescale = request.user.has_perm(RESCALE_PERMISSION)
    options: dict[str, Any] = {
        "fragments": fragments,
        "running": running,
        "parallel_units": columns,
        "open_pus": open_pus,
    }
    plan = None
    status = 200
    if request.method == "POST":
        if not can_rescale:
            raise PermissionDenied("rescaling needs the permission operations.rescale")
        form = RescaleForm(request.POST, **options)
        if not form.is_valid():
            status = 400
        else:
            plan_id = form.cleaned_data["plan_id"] if request.POST.get("action") == "start" else ""
            try:
                if plan_id:
                    op = operation_request(
                        user=request.user, body=form.body(dry_run=False), plan_id=plan_id
                    )
                    return redirect("dashboard:operation", operation_id=op.operation_id)
                planned = operation_request(user=request.user, body=form.body(dry_run=True))
                assert isinstance(planned, OperationPlan), "a dry run answers its kept plan"
            except RescaleError as refused:
                form.refuse(refused)
                status = status_for(refused)
            else:
                shown = plan_view(DryRunSerializer(planned).data, plans.plan_transfers(planned))
                data = request.POST.copy()
                data["plan_id"] = shown["plan_id"]
                data.setlist("add", [str(p) for p in form.cleaned_data["add"]])
                data.setlist("remove", [str(p) for p in form.cleaned_data["remove"]])
                form = RescaleForm(data, **options)
                form.is_valid()
                plan = shown
    else:
        form = RescaleForm(initial={"fragment": request.GET.get("fragment")}, **options)
    chosen_name = (form.data.get("fragment") if form.is_bound else None) or request.GET.get(
        "fragment"
    )
    chosen = next((f for f in fragments if f["name"] == chosen_name), None) or (
        fragments[0] if fragments else None
    )
    return render(
        request,
        "dashboard/rescale.html",
        {
            "form": form,
            "plan": plan,
            "fragments": fragments,
            "chosen": chosen,
            "chosen_pus": set(chosen["parallel_units"]) if chosen else set(),
            "added": form.ticked("add"),
            "removed": form.ticked("remove"),
            "parallel_units": columns,
            "open_pus": open_pus,
            "closed_pus": closed_pus,
            "custom": CUSTOM,
            "can_rescale": can_rescale,
        },
        status=status,
    )


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


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers ask for on pages that name no icon (the admin, the API
    docs): the console's icon, where the static files serve it (a temporary redirect: its
    hashed name changes with each release)."""
    response = redirect(static("dashboard/favicon.svg"))
    response["Cache-Control"] = "public, max-age=86400"
    return response


# -- errors outside any view: JSON under /api/, Django's pages elsewhere ------------------------
def _api_error(request: HttpRequest, status: int, code: str, detail: str) -> HttpResponse | None:
    if not request.path.startswith("/api/"):
        return None
    return JsonResponse({"code": code, "detail": detail}, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400 raised before a view (a body over DATA_UPLOAD_MAX_MEMORY_SIZE, a bad host)."""
    from django.views import defaults

    detail = str(exception) if exception else "the request could not be read"
    return _api_error(request, 400, "bad_request", detail) or defaults.bad_request(
        request, exception or Exception()
    )


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    from django.views import defaults

    return _api_error(
        request, 403, "permission_denied", "you may not do this"
    ) or defaults.permission_denied(request, exception or Exception())


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for a path no URL matches (an unknown endpoint, a key with a line break)."""
    from django.views import defaults

    return _api_error(
        request, 404, "not_found", f"no API endpoint at {request.path!r}; see /api/v1/"
    ) or defaults.page_not_found(request, exception or Exception())


def api_not_found(request: HttpRequest, unmatched: str = "") -> HttpResponse:
    """Any path under /api/ that no endpoint matches (the last URL pattern there): the JSON 404
    of :func:`page_not_found`, with ``DEBUG`` on too, where Django would answer its HTML debug
    page instead of calling ``handler404``. A path that only lacks its trailing slash is
    redirected to it, as ``APPEND_SLASH`` would have."""
    from django.http import HttpResponsePermanentRedirect
    from django.urls import Resolver404, resolve

    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(
                request.path + "/" + (f"?{query}" if query else "")
            )
    return page_not_found(request)


def server_error(request: HttpRequest) -> HttpResponse:
    from django.views import defaults

    return _api_error(
        request, 500, "server_error", "the server failed; the error is logged"
    ) or defaults.server_error(request)
