"""The cluster's metadata in the admin: to read, never to edit.

Pipelines, workers, PUs, fragments, mappings, epoch metrics and runner commands are the runner's
own report of the running topology (``topology_register``, ``epoch_record``) and the
orchestrator's instructions to it. An edit here would change nothing the runner does (a mapping
changed in Postgres moves no state, a hand-made command skips the protocol's checks) and would
make the control plane disagree with the data plane, unaudited. So the admin refuses every add,
change and delete, for superusers too, rather than recording such edits as audit events: placement
changes go through ``POST /api/v1/operations``, which checks them, moves the state and audits
them with the requester as actor.
"""

from django.contrib import admin

from rescaler.audit.admin import ReadOnlyAdmin
from rescaler.cluster.models import (
    EpochMetric,
    Fragment,
    ParallelUnit,
    Pipeline,
    RunnerCommand,
    VnodeMapping,
    Worker,
)


@admin.register(Pipeline)
class PipelineAdmin(ReadOnlyAdmin):
    list_display = ["name", "status", "last_epoch", "heartbeat_at"]


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ["name", "pipeline", "status", "alive", "executor_id", "host", "last_seen"]
    list_filter = ["status"]


@admin.register(ParallelUnit)
class ParallelUnitAdmin(ReadOnlyAdmin):
    list_display = ["number", "worker", "status", "last_executor", "tasks_total", "tasks_home"]


@admin.register(Fragment)
class FragmentAdmin(ReadOnlyAdmin):
    list_display = ["pipeline", "name", "kind", "region", "vnodes", "mapping_version"]
    list_filter = ["pipeline", "kind"]


@admin.register(VnodeMapping)
class VnodeMappingAdmin(ReadOnlyAdmin):
    list_display = ["fragment", "version", "created_at"]


@admin.register(EpochMetric)
class EpochMetricAdmin(ReadOnlyAdmin):
    list_display = ["pipeline", "epoch", "rows", "malformed", "duration_s", "committed_at"]
    list_filter = ["pipeline"]


@admin.register(RunnerCommand)
class RunnerCommandAdmin(ReadOnlyAdmin):
    list_display = ["pipeline", "kind", "status", "created_by", "created_at", "acked_at"]
    list_filter = ["status", "kind"]
