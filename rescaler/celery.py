"""The one Celery app. Configuration lives in Django settings under the CELERY_ prefix."""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, bootsteps
from kombu.exceptions import OperationalError as BrokerUnavailable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.local")

# the names of the tasks that drive operations (rescaler.operations.tasks), by which the services
# queue them without importing the tasks' module (rescaler.operations.enqueue)
DRIVE_OPERATION = "rescaler.operations.drive_operation"
WATCH_OPERATION = "rescaler.operations.watch_operation"
RESUME_OPERATIONS = "rescaler.operations.resume_operations"

app = Celery("rescaler")
app.config_from_object("django.conf:settings", namespace="CELERY")
# the tasks.py of every installed app (rescaler.operations.tasks drives operations), then the
# project's own rescaler/tasks.py: the rescaler package itself is not an installed app.
app.autodiscover_tasks()
app.autodiscover_tasks(["rescaler"])


class ResumeOnConnect(bootsteps.StartStopStep):
    """Queue ``resume_operations`` each time the worker's consumer (re)connects to the broker.

    At start, it picks up operations whose driver died. After a broker restart it is what brings
    operations back: a broker that keeps nothing on disk (Redis without persistence) comes back
    empty, without the drivers' queued messages nor the resume task's own, and Celery restarts
    the consumer's steps once it has reconnected.
    """

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c: Any) -> None:
        try:
            c.app.send_task(RESUME_OPERATIONS, countdown=1)
        except BrokerUnavailable:
            logging.getLogger(__name__).warning("resume_operations not queued: broker unavailable")


app.steps["consumer"].add(ResumeOnConnect)
