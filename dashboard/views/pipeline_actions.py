"""The cluster page's pipeline forms: an autoscaling policy, applying its recommendation, and
archiving a pipeline no runner reports for. Each calls the service the API calls, its refusal
shown on the panel, then goes back to the cluster page (or the operation it started)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from dashboard.api.permissions import POLICY_PERMISSION, RESCALE_PERMISSION
from dashboard.autoscaling_page import AutoscalingPolicyForm
from dashboard.autoscaling_page import auto_id as autoscaling_auto_id
from dashboard.views.cluster import render_home
from rescaler.autoscaling.errors import PolicyInvalid
from rescaler.autoscaling.recommendation import (
    recommendation_apply,
    recommendation_workers_request,
)
from rescaler.autoscaling.services import autoscaling_policy_update
from rescaler.operations.pipeline_archive import pipeline_archive
from workers.rescale.errors import RescaleError


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
    return render_home(request, status=400, autoscaling_forms={name: form})


@login_required
@require_POST
def autoscaling_apply_view(request: HttpRequest, name: str) -> HttpResponse:
    """ "Apply" on the recommendation: start its bound plan (``recommendation_apply``), then the
    operation's page; a refusal (the plan went stale, a fragment is busy) back on the panel. A
    recommendation short of PUs (``workers=ask``): the worker provider asked for its workers
    (``recommendation_workers_request``), and back on the panel with what came of it."""
    if not request.user.has_perm(RESCALE_PERMISSION):
        raise PermissionDenied("starting a rescale needs the permission operations.rescale")
    back = f"{reverse('dashboard:home')}#autoscaling-{name}"
    if request.POST.get("workers") == "ask":
        try:
            row = recommendation_workers_request(user=request.user, pipeline=name)
        except RescaleError as refused:
            messages.error(request, f"{refused.code}: {refused}")
        else:
            messages.info(request, f"Decision {row.pk} ({row.outcome}): {row.outcome_reason}")
        return redirect(back)
    try:
        op = recommendation_apply(
            user=request.user, pipeline=name, plan_id=request.POST.get("plan_id", "")
        )
    except RescaleError as refused:
        messages.error(request, f"{refused.code}: {refused}")
        return redirect(back)
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
