"""The rescale page (``/rescale/``): pick a fragment and its new PUs, preview the plan, start
it; what the page shows is worked out in ``dashboard.rescale_page``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from dashboard.api.errors import status_for
from dashboard.api.permissions import RESCALE_PERMISSION
from dashboard.api.selectors.cluster import cluster_info
from dashboard.api.serializers.plans import DryRunSerializer
from dashboard.matrix import cluster_matrix
from dashboard.rescale_page import CUSTOM, RescaleForm, plan_view
from rescaler.operations import plans
from rescaler.operations.models import OperationPlan
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import parallel_units_closed_to_vnodes
from workers.rescale.errors import RescaleError


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
