"""The worker provider (``workers.provider``): a machine for one more worker, and a removed
worker's machine given back. The release runs in a Celery task with retries
(``rescaler.runner.workers.tasks``), never in the runner's barrier."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Worker
from rescaler.dbwait import DATABASE_DOWN, database_back
from rescaler.runner.workers.changes import actor_of, audit_object
from rescaler.runner.workers.errors import ProviderRefused
from workers.control import WorkerInfo
from workers.provider import ProviderError, provider_from_env
from workers.rescale import errors
from workers.rescale.protocol import AuditObject

log = logging.getLogger(__name__)

# the range of ``worker_add``'s cores (the API publishes it)
CORES_MIN, CORES_MAX = 1, 64


class ReleaseFailed(Exception):
    """The provider could not release a machine; the task tries again (not an API refusal)."""


@dataclass(frozen=True)
class WorkerAdded:
    """The provider's answer to "one more worker": it joins by itself a few seconds later."""

    provider: str
    cores: int
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {"provider": self.provider, "cores": self.cores, "answer": self.answer}


def cores_parse(value: Any) -> int:
    """A worker's cores as the API and the CLI take them."""
    if isinstance(value, bool) or not isinstance(value, int) or not CORES_MIN <= value <= CORES_MAX:
        raise errors.MalformedRequest(
            f"'cores' must be an integer from {CORES_MIN} to {CORES_MAX}, not {value!r}"
        )
    return value


def worker_add(*, user: Any, cores: int = 1, actor_name: str = "") -> WorkerAdded:
    """Ask the worker provider for one more worker (``workers.provider``); audited with the
    provider's answer. A provider that cannot (none configured, its command failed) is a
    ``worker_provider_refused`` refusal with its reason, and records nothing. The machine is
    started before its audit is written: a database restart in between is waited out.
    ``actor_name``: the component that asked when no user did (the autoscaler)."""
    cores = cores_parse(cores)
    try:
        provider = provider_from_env()
        answer = provider.add(cores)
    except ProviderError as exc:
        raise ProviderRefused(f"cannot add a worker: {exc}") from exc
    added = WorkerAdded(provider=provider.name, cores=cores, answer=answer)
    audited = _audit_done(
        actor=actor_of(user),
        actor_name=actor_name if actor_of(user) is None else "",
        action="worker.add_requested",
        obj=(AuditObject.WORKER, f"provider:{provider.name}"),
        after=added.to_json(),
    )
    if not audited:
        return replace(
            added, answer=f"{answer} (not audited: the database was unavailable; see the logs)"
        )
    return added


def _audit_done(**event: Any) -> bool:
    """Audit what is already done outside the database (a machine started): a database that
    went away meanwhile is waited for (``RESCALER_DB_WAIT_S``), as a 503 would tell the
    operator to do it again. Still away: logged, and False."""
    deadline = time.monotonic() + float(settings.RESCALER_DB_WAIT_S)
    while True:
        try:
            audit_record(**event)
            return True
        except DATABASE_DOWN as exc:
            if not database_back(deadline):
                log.error("%s done but not audited: the database is unavailable: %s",
                          event["action"], exc)  # fmt: skip
                return False


def worker_release(*, worker_pk: int, last_attempt: bool = True) -> str:
    """Ask the provider to release a removed worker's machine; the answer, or the error, goes
    into the audit (``worker.released`` / ``worker.release_failed``). A failure is raised as
    ``ReleaseFailed`` unless it is the ``last_attempt`` (the task tries again); the last one is
    recorded, never raised."""
    worker = Worker.objects.select_related("pipeline").get(pk=worker_pk)
    info = WorkerInfo(
        name=worker.name,
        executor_id=worker.executor_id,
        host=worker.host,
        cores=worker.cores,
        parallel_units=tuple(worker.parallel_units.values_list("number", flat=True)),
        alive=False,
        bootstrapped_epoch=worker.bootstrapped_epoch
        if worker.bootstrapped_epoch is not None
        else -1,
    )
    try:
        provider = provider_from_env()
        answer = provider.release(info)
    except Exception as exc:  # a provider's failure is tried again, then recorded
        answer = f"{type(exc).__name__}: {exc}"
        if not last_attempt:
            log.info("worker %s: release failed, to be tried again: %s", worker.name, answer)
            raise ReleaseFailed(answer) from exc
        worker_release_failed(worker_pk=worker.pk, error=answer)
        return answer
    audit_record(
        actor_name="control-plane",
        action="worker.released",
        obj=audit_object(worker),
        after={"provider": provider.name, "answer": answer},
    )
    return answer


def worker_release_failed(*, worker_pk: int, error: str) -> None:
    """The machine of a removed worker was not given back: the operator hears of it."""
    worker = Worker.objects.get(pk=worker_pk)
    audit_record(
        actor_name="control-plane",
        action="worker.release_failed",
        obj=audit_object(worker),
        after={"error": error},
    )
    log.warning("worker %s: release failed: %s", worker.name, error)
