"""The cluster page's worker forms: add a worker; cordon, uncordon or drain one. Each calls
the service the API calls, shows its refusal on the form, then goes back to the cluster page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dashboard.api.permissions import RESCALE_PERMISSION
from dashboard.api.selectors.cluster import cluster_info
from dashboard.cluster_workers import worker_rows
from dashboard.forms import WORKER_ACTIONS, AddWorkerForm
from dashboard.views.cluster import open_worker_action, render_home
from rescaler.runner import workers as worker_services
from workers.rescale.errors import RescaleError


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
    return render_home(request, status=400, add_form=form)


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
    opened = open_worker_action(request, rows, action=action, name=name, form=form)
    return render_home(request, status=400, action=opened)
