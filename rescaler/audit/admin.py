"""The audit in the admin: to read, never to forge or erase.

Audit events are append-only (``AuditEvent.save``/``delete`` refuse too); the admin refuses
first, so a superuser gets a 403 rather than an error page. ``ReadOnlyAdmin`` is the base of
every control-plane model's admin: a row added, edited or deleted by hand would be a change
with no audit event, so the admin only shows.
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from rescaler.audit.models import AuditEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """View permission only: no add, change or delete (nor the bulk delete action)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "object_type", "object_id"]
    list_filter = ["action", "object_type"]
