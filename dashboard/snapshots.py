"""The console's Snapshots page: a pipeline's snapshots, its last restore, the recent requests,
and "Snapshot now" for those allowed. Rendered on the server and complete without JavaScript:
the form posts here, the service (``rescaler.cluster.snapshots``) decides, and the page is
redirected to (POST, redirect, GET) or shown again with the refusal next to the field."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from dashboard.api.permissions import RESCALE_PERMISSION
from dashboard.recovery_tables import snapshot_tables
from rescaler.cluster import snapshots as snapshot_services
from rescaler.cluster.models import Pipeline
from workers.rescale import errors
from workers.rescale.protocol import REASON_MAX_CHARS


class SnapshotNowForm(forms.Form):
    reason = forms.CharField(
        label="Reason (goes to the audit trail)",
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "e.g. before the 14:00 deploy"}),
        error_messages={"required": "a reason is required: say why (it goes to the audit trail)"},
    )

    def clean_reason(self) -> str:
        """The service's rule of a reason, so the page and the API refuse the same text."""
        try:
            return snapshot_services.reason_clean(self.cleaned_data["reason"])
        except errors.RescaleError as exc:
            raise forms.ValidationError(str(exc)) from None


def _pipeline_name(pipeline: str | None) -> str | None:
    """The pipeline the page is about: the one named, else the first registered (by name)."""
    if pipeline is None:
        return Pipeline.objects.order_by("name").values_list("name", flat=True).first()
    if "\x00" in pipeline or not Pipeline.objects.filter(name=pipeline).exists():
        raise Http404(f"no pipeline named {pipeline!r} has registered")
    return pipeline


@login_required
@require_http_methods(["GET", "POST"])
def snapshots_page(request: HttpRequest, pipeline: str | None = None) -> HttpResponse:
    """GET: the page. POST: "Snapshot now" (needs ``operations.rescale``)."""
    name = _pipeline_name(pipeline)
    can_snapshot = request.user.has_perm(RESCALE_PERMISSION)
    form = SnapshotNowForm()
    status = 200
    if request.method == "POST":
        if not can_snapshot:
            raise PermissionDenied(f"taking a snapshot needs the {RESCALE_PERMISSION} permission")
        if name is None:
            raise Http404("no pipeline has registered yet")
        form = SnapshotNowForm(request.POST)
        status = 400
        if form.is_valid():
            try:
                command = snapshot_services.snapshot_request(
                    user=request.user, pipeline=name, reason=form.cleaned_data["reason"]
                )
            except snapshot_services.RunnerDown as exc:
                form.add_error(None, str(exc))
                status = 409
            else:
                messages.success(
                    request,
                    f"Snapshot requested (runner command {command.id}): the runner takes it at "
                    f"its next barrier where none is being written and no vnode is in transit.",
                )
                return redirect("dashboard:pipeline-snapshots", pipeline=name)
    overview = snapshot_services.snapshot_overview(pipeline=name) if name else None
    context: dict[str, Any] = {
        "overview": overview,
        "tables": snapshot_tables(overview) if overview else {},
        "pipelines": list(Pipeline.objects.order_by("name").values_list("name", flat=True)),
        "can_snapshot": can_snapshot,
        "form": form,
    }
    return render(request, "dashboard/snapshots.html", context, status=status)
