"""Where an epoch task runs: its executor and host, as the task itself sees them."""

from __future__ import annotations

import functools
import os
import re
import socket
from pathlib import Path


@functools.cache
def task_location() -> tuple[str, str]:
    """(Spark executor id, host) of the process running this task. Kubernetes sets
    ``SPARK_EXECUTOR_ID``; a standalone worker gives its executor a log URL naming the executor
    and runs it in ``<work dir>/<application>/<executor id>``; local mode has only the driver."""
    executor = os.environ.get("SPARK_EXECUTOR_ID", "")
    if not executor:
        found = re.search(r"executorId=([^&]+)", os.environ.get("SPARK_LOG_URL_STDOUT", ""))
        executor = found.group(1) if found else ""
    if not executor:
        cwd = Path.cwd()
        executor = cwd.name if cwd.parent.name.startswith("app-") else "driver"
    host = os.environ.get("SPARK_LOCAL_HOSTNAME") or os.environ.get("SPARK_LOCAL_IP")
    return executor, host or socket.gethostname()
