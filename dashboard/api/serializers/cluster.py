"""``GET cluster`` (pipelines, workers, PUs, fragments with their mappings and load) and
``GET workers``."""

from __future__ import annotations

from rest_framework import serializers

from rescaler.cluster.models import WORKER_STATUS_CHOICES, ParallelUnit, Pipeline
from rescaler.runner.workers import NOTICE_ORIGINS


class EpochSummarySerializer(serializers.Serializer):
    epoch = serializers.IntegerField()
    rows = serializers.IntegerField()
    malformed = serializers.IntegerField()
    duration_s = serializers.FloatField()
    committed_at = serializers.DateTimeField()


class LocalitySerializer(serializers.Serializer):
    tasks_total = serializers.IntegerField(help_text="PU tasks counted (one per PU per epoch).")
    tasks_home = serializers.IntegerField(
        help_text="Of those, the ones that ran on the PU's own worker's executor."
    )
    share = serializers.FloatField(
        allow_null=True, help_text="tasks_home / tasks_total; null before any task was counted."
    )


class PipelineInfoSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=Pipeline.Status.choices)
    runner_alive = serializers.BooleanField(
        help_text="Running, with a heartbeat newer than RESCALER_HEARTBEAT_STALE_S."
    )
    last_epoch = serializers.IntegerField(help_text="-1 until the first epoch commits.")
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    heartbeat_age_s = serializers.FloatField(allow_null=True)
    spark = serializers.DictField(child=serializers.JSONField())
    last_epoch_metric = EpochSummarySerializer(allow_null=True)
    locality = LocalitySerializer(help_text="Over every PU of the pipeline.")


class WorkerNoticeInfoSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When the notice came.")
    deadline = serializers.DateTimeField(help_text="When the worker says it goes.")
    origin = serializers.ChoiceField(
        choices=NOTICE_ORIGINS,
        help_text="Who said so: a platform hook (the API), or Spark decommissioning its executor.",
    )


class WorkerInfoSerializer(serializers.Serializer):
    name = serializers.CharField()
    pipeline = serializers.CharField()
    alive = serializers.BooleanField(
        help_text="Its executor is registered and the runner's heartbeat is fresh."
    )
    last_seen = serializers.DateTimeField(allow_null=True)
    parallel_units = serializers.ListField(child=serializers.IntegerField())
    status = serializers.ChoiceField(
        choices=WORKER_STATUS_CHOICES, help_text="See docs/elastic-workers.md, Statuses."
    )
    status_reason = serializers.CharField(
        allow_blank=True, help_text="Why it has its status: the operator's words, or what was seen."
    )
    executor_id = serializers.CharField(
        allow_blank=True, help_text='Spark\'s executor id ("driver" in local mode).'
    )
    host = serializers.CharField(allow_blank=True)
    cores = serializers.IntegerField()
    bootstrapped_epoch = serializers.IntegerField(
        allow_null=True,
        help_text="The first epoch its PUs' stores existed at (-1: not yet, no vnode may go to "
        "it); null for a worker the runner registered with its topology and never reported.",
    )
    joined_at = serializers.DateTimeField(allow_null=True)
    left_at = serializers.DateTimeField(allow_null=True)
    drain_operation_id = serializers.CharField(
        allow_null=True, help_text="The operation that drains (or drained) it."
    )
    notice = WorkerNoticeInfoSerializer(
        allow_null=True,
        help_text="Its preemption notice, if it gave one: it was cordoned then, and drained "
        "under RESCALER_PREEMPTION_POLICY=drain.",
    )
    locality = LocalitySerializer(help_text="Over its PUs.")


class ParallelUnitInfoSerializer(serializers.Serializer):
    worker = serializers.CharField()
    alive = serializers.BooleanField(help_text="Its worker is alive and the PU is active.")
    fragments = serializers.ListField(
        child=serializers.CharField(), help_text="The fragments running on this PU."
    )
    status = serializers.ChoiceField(choices=ParallelUnit.Status.choices)
    last_executor = serializers.CharField(
        allow_blank=True, help_text="The executor its task ran on in the last counted epoch."
    )
    last_host = serializers.CharField(allow_blank=True)
    locality = LocalitySerializer()


class PuLoadSerializer(serializers.Serializer):
    parallel_unit = serializers.IntegerField()
    vnodes = serializers.IntegerField(help_text="Vnodes the mapping gives this PU.")
    keys = serializers.IntegerField(help_text="Keys held (last per-vnode report).")
    bytes = serializers.IntegerField(help_text="Bytes of state held (last per-vnode report).")
    epoch_rows = serializers.IntegerField(help_text="Records processed in the last epoch.")
    epoch_keys = serializers.IntegerField(help_text="Keys in the store after the last epoch.")
    epoch_bytes = serializers.IntegerField(help_text="Store bytes after the last epoch.")


class FragmentLoadSerializer(serializers.Serializer):
    epoch = serializers.IntegerField(allow_null=True, help_text="The epoch of the epoch_* figures.")
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()
    per_parallel_unit = PuLoadSerializer(many=True)


class FragmentInfoSerializer(serializers.Serializer):
    name = serializers.CharField()
    pipeline = serializers.CharField()
    kind = serializers.ChoiceField(choices=["source", "stateful", "sink"])
    position = serializers.IntegerField()
    region = serializers.IntegerField()
    key = serializers.CharField(allow_blank=True)
    operator = serializers.CharField(allow_blank=True)
    upstream = serializers.CharField(allow_blank=True)
    vnodes = serializers.IntegerField(allow_null=True)
    parallel_units = serializers.ListField(child=serializers.IntegerField())
    busy_with = serializers.CharField(
        allow_null=True, help_text="The operation in progress on this fragment, if any."
    )
    mapping_version = serializers.IntegerField(
        allow_null=True,
        help_text="The current mapping's version; null for a fragment without state.",
    )
    mapping = serializers.ListField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="mapping[vnode] = the PU that owns the vnode; null for a fragment without state.",
    )
    load = FragmentLoadSerializer()


class ClusterSerializer(serializers.Serializer):
    pipelines = PipelineInfoSerializer(many=True)
    workers = WorkerInfoSerializer(many=True)
    parallel_units = serializers.DictField(
        child=ParallelUnitInfoSerializer(), help_text="PU number -> its worker and fragments."
    )
    fragments = FragmentInfoSerializer(many=True)


class ClusterQuerySerializer(serializers.Serializer):
    pipeline = serializers.CharField(
        required=False, allow_blank=True, help_text="Only this pipeline (empty: all)."
    )
