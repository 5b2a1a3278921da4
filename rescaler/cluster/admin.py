from django.contrib import admin

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
class PipelineAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "last_epoch", "heartbeat_at"]


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ["name", "pipeline", "alive", "last_seen"]


@admin.register(ParallelUnit)
class ParallelUnitAdmin(admin.ModelAdmin):
    list_display = ["number", "worker"]


@admin.register(Fragment)
class FragmentAdmin(admin.ModelAdmin):
    list_display = ["pipeline", "name", "kind", "region", "vnodes", "mapping_version"]
    list_filter = ["pipeline", "kind"]


@admin.register(VnodeMapping)
class VnodeMappingAdmin(admin.ModelAdmin):
    list_display = ["fragment", "version", "created_at"]
    readonly_fields = ["fragment", "version", "mapping", "created_at"]


@admin.register(EpochMetric)
class EpochMetricAdmin(admin.ModelAdmin):
    list_display = ["pipeline", "epoch", "rows", "malformed", "duration_s", "committed_at"]
    list_filter = ["pipeline"]


@admin.register(RunnerCommand)
class RunnerCommandAdmin(admin.ModelAdmin):
    list_display = ["pipeline", "kind", "status", "created_by", "created_at", "acked_at"]
    list_filter = ["status", "kind"]
