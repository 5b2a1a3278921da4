"""The one Celery app. Configuration lives in Django settings under the CELERY_ prefix."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.local")

app = Celery("rescaler")
app.config_from_object("django.conf:settings", namespace="CELERY")
# tasks.py of every installed app (rescaler.cluster, dashboard), plus the project's own.
app.autodiscover_tasks()
app.autodiscover_tasks(["rescaler"])
