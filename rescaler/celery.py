"""The one Celery app. Configuration lives in Django settings under the CELERY_ prefix."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.local")

app = Celery("rescaler")
app.config_from_object("django.conf:settings", namespace="CELERY")
# the tasks.py of every installed app (rescaler.operations.tasks drives operations), then the
# project's own rescaler/tasks.py: the rescaler package itself is not an installed app.
app.autodiscover_tasks()
app.autodiscover_tasks(["rescaler"])
