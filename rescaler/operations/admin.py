from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from rescaler.operations.models import AuditEvent, RescaleOperation, RescaleStep


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
        "collect_epoch",
        "acquire_epoch",
        "drop_epoch",
    )
    fields = STEP_FIELDS
    readonly_fields = STEP_FIELDS


@admin.register(RescaleOperation)
class RescaleOperationAdmin(admin.ModelAdmin):
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
    readonly_fields = [f.name for f in RescaleOperation._meta.fields]
    inlines = [StepInline]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_name", "action", "object_type", "object_id"]
    list_filter = ["action", "object_type"]
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
