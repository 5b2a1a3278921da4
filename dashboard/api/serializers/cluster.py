"""``GET cluster`` (pipelines, workers, PUs, fragments with their mappings and load) and
``GET workers``."""

from __future__ import annotations

from typing import Any

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

    as_of = serializers.DateTimeField(
        required=False,
        help_text="The placement as of this instant (ISO 8601; without an offset, in the "
        "server's time zone): each stateful fragment's mapping then, in the past placement's "
        "document. Not with version.",
    )
    fragment = serializers.CharField(
        required=False,
        max_length=64,
        help_text="With version: the fragment whose mapping version is asked.",
    )
    version = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=2**31 - 1,
        help_text="With fragment: the placement as that kept mapping version of the fragment "
        "left it, the other fragments as of the moment it took effect.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "as_of" in attrs and ("version" in attrs or "fragment" in attrs):
            raise serializers.ValidationError(
                {"as_of": ["give as_of, or fragment and version, not both"]}
            )
        if ("version" in attrs) != ("fragment" in attrs):
            missing = "fragment" if "version" in attrs else "version"
            raise serializers.ValidationError(
                {missing: [f"{missing} is needed too: versions are per fragment"]}
            )
        return attrs


class PastPuSerializer(serializers.Serializer):
    parallel_unit = serializers.IntegerField()
    vnodes = serializers.IntegerField(help_text="Vnodes the mapping then gave this PU.")


class PastFragmentSerializer(serializers.Serializer):
    name = serializers.CharField()
    pipeline = serializers.CharField()
    vnodes = serializers.IntegerField(allow_null=True)
    mapping_version = serializers.IntegerField(
        allow_null=True,
        help_text="The kept version in effect then; null before the fragment's first one.",
    )
    mapping = serializers.ListField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="mapping[vnode] = the PU that owned the vnode then; null before the first.",
    )
    parallel_units = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The PUs the mapping gave a vnode (the PU set of a past version is not kept).",
    )
    effective_at = serializers.DateTimeField(
        allow_null=True, help_text="When the version took effect (the control plane recorded it)."
    )
    superseded_at = serializers.DateTimeField(
        allow_null=True, help_text="When the next kept version took effect; null: still in effect."
    )
    operation_id = serializers.CharField(
        allow_null=True, help_text="The operation that made the version; null: none did."
    )
    previous_version = serializers.IntegerField(
        allow_null=True, help_text="The kept version before it (kept numbers may skip one)."
    )
    next_version = serializers.IntegerField(allow_null=True, help_text="The kept version after it.")
    first_version_at = serializers.DateTimeField(
        allow_null=True, help_text="When the fragment's first kept version took effect."
    )
    per_parallel_unit = PastPuSerializer(many=True)


class ClusterPlacementSerializer(serializers.Serializer):
    """``GET cluster`` with ``as_of``, or ``fragment`` and ``version``: the past placement."""

    as_of = serializers.DateTimeField(
        help_text="The instant shown: the one asked (now, if later), or when the version "
        "asked took effect."
    )
    fragment = serializers.CharField(allow_null=True, help_text="The fragment asked by version.")
    version = serializers.IntegerField(allow_null=True, help_text="The version asked.")
    before_first_version = serializers.BooleanField(
        help_text="No fragment had a kept mapping version yet at as_of."
    )
    first_version_at = serializers.DateTimeField(
        allow_null=True, help_text="When the first kept version of any fragment took effect."
    )
    detail = serializers.CharField(help_text="What the document shows, in words.")
    fragments = PastFragmentSerializer(many=True)
