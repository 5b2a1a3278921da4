"""The record of every change: who did what to which object, with its state before and after.

The bottom of the control plane's apps: every other app records here, and this app imports none
of them (``tests/unit/test_layering.py``). The table is the one the events were first written
to, ``operations_auditevent`` (``migrations/0001_initial.py`` adopts it, rows and all).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> int:
        raise PermissionError("the audit log is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError("the audit log is append-only")


class AuditEvent(models.Model):
    """Who did what to which object, with the state before and after. Never changed."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150)  # the username, or "runner", "orchestrator"
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        db_table = "operations_auditevent"  # where the events were written before this app
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["object_type", "object_id"], name="operations__object__6edc99_idx")
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_type}:{self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("the audit log is append-only")
