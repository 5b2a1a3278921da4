"""One operation's page (``/operations/<id>/``) and its cancel form; what the page shows is
worked out in ``dashboard.operation_page``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_tables2 import RequestConfig

from dashboard.api.permissions import RESCALE_PERMISSION
from dashboard.epochs import epoch_series
from dashboard.forms import CancelForm
from dashboard.key_finder import key_finder
from dashboard.live import step_ranges
from dashboard.operation_page import operation_for_page
from dashboard.operation_page import page_context as operation_page_context
from dashboard.tables import StepTable
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.models import RescaleOperation, RescaleStep
from workers.rescale.errors import RescaleError

STEPS_PER_PAGE = 100


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
