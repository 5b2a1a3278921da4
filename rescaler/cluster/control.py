"""The data plane's control interface, implemented with the ORM (the runner's side of Postgres)."""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections

from rescaler.cluster import services
from rescaler.cluster.models import RunnerCommand
from rescaler.operations.progress import operation_progress_record
from workers.control import Command, EpochReport, Topology


class OrmControl:
    """``workers.control.ControlInterface`` over Postgres. Safe to call from several threads:
    the runner's heartbeat thread gets its own connection, as Django gives one per thread."""

    def register(self, topology: Topology) -> None:
        close_old_connections()
        services.topology_register(topology=topology)

    def poll_commands(self, pipeline: str) -> list[Command]:
        close_old_connections()
        pending = RunnerCommand.objects.filter(
            pipeline__name=pipeline, status=RunnerCommand.Status.PENDING
        ).order_by("id")
        return [Command(id=c.id, kind=c.kind, payload=c.payload) for c in pending]

    def ack_command(self, command_id: int, status: str, detail: str = "") -> None:
        services.command_ack(command_id=command_id, status=status, detail=detail)

    def report_epoch(self, report: EpochReport) -> None:
        close_old_connections()
        services.epoch_record(report=report)

    def heartbeat(self, pipeline: str, epoch: int, status: str, spark: dict[str, Any]) -> None:
        close_old_connections()
        services.runner_heartbeat(pipeline=pipeline, epoch=epoch, status=status, spark=spark)

    def report_progress(self, pipeline: str, progress: dict[str, Any]) -> None:
        close_old_connections()
        operation_progress_record(pipeline=pipeline, progress=progress)
