"""Worker providers: who starts a Spark worker when an operator asks for one, and stops it after
its drain (docs/elastic-workers.md).

* :class:`LocalProvider` starts ``spark-class org.apache.spark.deploy.worker.Worker`` processes on
  this machine against a standalone master (``SPARK_MASTER=spark://…``) and stops them;
* :class:`CommandProvider` runs ``RESCALER_WORKER_PROVIDER_COMMAND add`` / ``… release <worker>
  <host>``: the hook for an external manager (``docker compose up --scale spark-worker=N``, a
  Kubernetes scale, a cloud API);
* :class:`NoProvider` refuses, with the reason: local mode has one JVM and nothing to add.

``provider_from_env()`` picks one from ``RESCALER_WORKER_PROVIDER`` (``local``, ``command`` or
``none``; default ``local`` when ``SPARK_MASTER`` is a ``spark://`` URL, else ``none``). The local
provider's workers share this host's disk for their stores, or, with
``RESCALER_LOCAL_DISKS=private``, each has a disk of its own, as if each were a host.

Its modules: ``base`` (the protocol, :class:`ProviderError`, ``NoProvider`` and
``CommandProvider``), ``local`` (``LocalProvider`` and ``LocalMaster``) and ``processes`` (the
helpers they start and stop Spark's processes with).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from workers.provider.base import CommandProvider, NoProvider, ProviderError, WorkerProvider
from workers.provider.local import (
    RELEASE_DRAIN_S,
    LocalMaster,
    LocalProvider,
    LocalWorker,
    local_store_dir,
    local_workers_dir,
    private_disks,
)
from workers.provider.processes import free_port, spark_home, wait_for_port

__all__ = [
    "RELEASE_DRAIN_S",
    "CommandProvider",
    "LocalMaster",
    "LocalProvider",
    "LocalWorker",
    "NoProvider",
    "ProviderError",
    "WorkerProvider",
    "free_port",
    "local_store_dir",
    "local_workers_dir",
    "provider_from_env",
    "spark_home",
    "wait_for_port",
]


def provider_from_env(env: Mapping[str, str] | None = None) -> WorkerProvider:
    """The provider ``RESCALER_WORKER_PROVIDER`` names (see the module's docstring)."""
    env = os.environ if env is None else env
    master = env.get("SPARK_MASTER", "")
    kind = env.get("RESCALER_WORKER_PROVIDER") or (
        "local" if master.startswith("spark://") else "none"
    )
    if kind == "none":
        return NoProvider(
            "no worker provider: local mode runs in one JVM. Run a standalone master "
            "(scripts/dev --workers N) or set RESCALER_WORKER_PROVIDER=command"
        )
    if kind == "local":
        return LocalProvider(
            master,
            local_workers_dir(env),
            local_dir=local_store_dir(env),
            private_disks=private_disks(env),
        )
    if kind == "command":
        command = env.get("RESCALER_WORKER_PROVIDER_COMMAND", "")
        if not command:
            raise ProviderError(
                "RESCALER_WORKER_PROVIDER=command needs RESCALER_WORKER_PROVIDER_COMMAND"
            )
        return CommandProvider(command)
    raise ProviderError(f"RESCALER_WORKER_PROVIDER must be local, command or none, not {kind!r}")
