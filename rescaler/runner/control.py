"""The data plane's control interface, implemented with the ORM (the runner's side of Postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)

from rescaler.cluster import restores, services
from rescaler.cluster.models import Fragment, RunnerCommand
from rescaler.operations.progress import operation_progress_record
from rescaler.runner import workers as _workers
from workers.control import (
    Command,
    ControlUnavailable,
    EpochReport,
    Heartbeat,
    Topology,
    WorkerInfo,
)
from workers.rescale.protocol import ProgressAck


@contextmanager
def _database() -> Iterator[None]:
    """One call on this thread's connection: a connection the database dropped (a restart) is
    replaced first, and losing the database during the call is reported as
    ``ControlUnavailable``, which the runner waits out (``workers.control.PatientControl``)."""
    close_old_connections()
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        connection.close()  # the next call opens a new one
        raise ControlUnavailable(
            str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
        ) from exc


class OrmControl:
    """``workers.control.ControlInterface`` over Postgres. Safe to call from several threads:
    the runner's heartbeat thread gets its own connection, as Django gives one per thread.
    ``state_dir`` is the runner's (where a restore leaves ``restored.json``, a rebuild
    ``rebuilt.json``); None: STATE_DIR."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = state_dir

    def register(self, topology: Topology) -> None:
        with _database():
            services.topology_register(topology=topology)
            # a runner that just restored registers as on every start: audit the restore once
            restores.restore_learn(pipeline=topology.pipeline, state_dir=self.state_dir)
            restores.rebuild_learn(pipeline=topology.pipeline, state_dir=self.state_dir)

    def mapping_versions(self, pipeline: str) -> dict[str, int]:
        with _database():
            return dict(
                Fragment.objects.filter(pipeline__name=pipeline).values_list(
                    "name", "mapping_version"
                )
            )

    def poll_commands(self, pipeline: str) -> list[Command]:
        with _database():
            pending = RunnerCommand.objects.filter(
                pipeline__name=pipeline, status=RunnerCommand.Status.PENDING
            ).order_by("id")
            return [Command(id=c.id, kind=c.kind, payload=c.payload) for c in pending]

    def ack_command(self, command_id: int, status: str, detail: str = "") -> None:
        self.ack_commands([(command_id, status, detail)])

    def ack_commands(self, acks: list[tuple[int, str, str]]) -> None:
        with _database(), transaction.atomic():
            services.commands_ack(acks=acks)
            for command_id, status, detail in acks:
                _workers.worker_command_acked(command_id=command_id, status=status, detail=detail)

    def report_epoch(self, report: EpochReport) -> None:
        with _database():
            services.epoch_record(report=report)

    def heartbeat(self, beat: Heartbeat) -> None:
        with _database():
            services.runner_heartbeat(
                pipeline=beat.pipeline,
                epoch=beat.epoch,
                status=beat.status,
                spark=beat.spark,
                start=beat.start,
            )

    def report_progress(self, pipeline: str, progress: dict[str, Any]) -> ProgressAck:
        with _database():
            return operation_progress_record(pipeline=pipeline, progress=progress)

    def report_workers(self, pipeline: str, epoch: int, workers: list[WorkerInfo]) -> None:
        with _database():
            _workers.workers_record(pipeline=pipeline, epoch=epoch, workers=workers)
