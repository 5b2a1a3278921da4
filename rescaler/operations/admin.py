"""Operations and their plans in the admin: to read, never to forge or erase.

An operation is created, cancelled and finished only through the API and the orchestrator, each
step audited; an operation added, edited or deleted here would have no audit event, or would
orphan the events that name it. The admin refuses, so a superuser gets a 403 rather than an
error page (the audit events' own admin is ``rescaler.audit.admin``).
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from rescaler.audit.admin import ReadOnlyAdmin
from rescaler.operations.models import OperationPlan, RescaleOperation, RescaleStep


class StepInline(admin.TabularInline):
    model = RescaleStep
    extra = 0
    can_delete = False
    STEP_FIELDS = (
        "step",
        "fragment",
        "source_pu",
        "target_pu",
        "vnodes",
        "phase",
        "keys_moved",
        "hold_queue",
        "hold_bytes",
        "collect_epoch",
        "acquire_epoch",
        "drop_epoch",
    )
    fields = STEP_FIELDS
    readonly_fields = STEP_FIELDS

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RescaleOperation)
class RescaleOperationAdmin(ReadOnlyAdmin):
    list_display = [
        "operation_id",
        "pipeline",
        "strategy",
        "status",
        "requested_by",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "strategy"]
    inlines = [StepInline]


@admin.register(OperationPlan)
class OperationPlanAdmin(ReadOnlyAdmin):
    """Dry runs' plans: a plan edited here would start something no dry run showed."""

    list_display = ["plan_id", "pipeline", "requested_by", "created_at", "expires_at", "used_at"]
