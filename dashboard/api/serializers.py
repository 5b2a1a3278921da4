"""What the API reads and writes, and the OpenAPI schema of both.

The operation request is parsed by ``workers.rescale.protocol.OperationRequest.parse``, the one
place its rules live: ``OperationRequestSerializer`` validates by calling it, and its schema takes
its bounds and choices from the same constants and enums (``GRANULARITY_MINIMUMS``,
``GRANULARITY_MAXIMUMS``, ``PARALLEL_UNIT_MAX``, ``FRAGMENT_NAME_MAX_CHARS``, ``Strategy``), so
the OpenAPI schema and the parser cannot disagree.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dashboard.api.rows import RowListSerializer, RowSerializer
from dashboard.api.selectors.operations import (
    operation_events,
    operation_runner_progress,
    operation_vnodes,
)
from dashboard.format import moved_figures
from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import WORKER_STATUS_CHOICES, ParallelUnit, Pipeline
from rescaler.operations.models import PLAN_ID_CHARS, RescaleOperation, RescaleStep, choices
from rescaler.operations.plans import plan_id_parse
from rescaler.operations.waiting import WaitingFor, operation_waiting
from rescaler.runner.workers import (
    CORES_MAX,
    CORES_MIN,
    NOTICE_ORIGINS,
    cores_parse,
    deadline_parse,
)
from workers.rescale import errors
from workers.rescale.protocol import (
    FRAGMENT_NAME_MAX_CHARS,
    GRANULARITY_CHOSEN,
    GRANULARITY_MAXIMUMS,
    GRANULARITY_MINIMUMS,
    GRANULARITY_OPTIONAL,
    GRANULARITY_TYPES,
    HOT_VNODES_ORDERS,
    PARALLEL_UNIT_MAX,
    PRESETS,
    REASON_MAX_CHARS,
    ChangeKind,
    Granularity,
    OperationRequest,
    OperationStatus,
    Routing,
    StepPhase,
    StopStartPhase,
    Strategy,
)

# -- the schema's enum names ---------------------------------------------------------------------
# SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] (rescaler/settings/base.py) names these choice
# lists. An override matches a field by its exact (value, label) pairs: the fields' choices are
# ``choices(<enum>)`` (the label is the value), so the override names the same list, not the enum
# class (whose labels drf-spectacular takes from the member names, and then matches nothing).
OPERATION_STATUS_CHOICES = choices(OperationStatus)  # RescaleOperation.status
STEP_PHASE_CHOICES = choices(StepPhase)  # RescaleStep.phase and the phases derived from it
STRATEGY_CHOICES = choices(Strategy)
CHANGE_KIND_CHOICES = choices(ChangeKind)  # a fragment plan's kind, whole or summed up


# -- the operation request -----------------------------------------------------------------------
def _granularity_property(name: str) -> dict[str, Any]:
    prop: dict[str, Any] = {
        "type": "integer" if GRANULARITY_TYPES[name] is int else "number",
        "minimum": GRANULARITY_MINIMUMS[name],
        "maximum": GRANULARITY_MAXIMUMS[name],
    }
    if name in GRANULARITY_OPTIONAL:
        prop["nullable"] = True
    else:
        prop["default"] = getattr(Granularity(), name)
    if name in GRANULARITY_CHOSEN:
        prop["description"] = (
            "Left out or null: chosen from the plan's size (the fewest waves that hold at most "
            "an eighth of a fragment's vnodes each and transfer within about one epoch); the "
            "dry run says what was chosen, and why, in granularity_reason."
        )
    return prop


GRANULARITY_OBJECT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **{name: _granularity_property(name) for name in GRANULARITY_TYPES},
        "hot_vnodes": {
            "type": "string",
            "enum": list(HOT_VNODES_ORDERS),
            "nullable": True,
            "default": Granularity().hot_vnodes,
            "description": "Order the moves by the vnodes' measured load (records per epoch, "
            "then keys, then bytes): first (the default), the hottest first; last, the hottest "
            "last; null, by vnode.",
        },
    },
}


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": sorted(PRESETS)},
            GRANULARITY_OBJECT,
        ],
        "nullable": True,
        "description": "How the move is cut into steps and paced: a preset "
        "(fluid: 1 vnode per step, 1 in flight; batched: 8 and 2; all_at_once) or an object; "
        "null or absent: 1 vnode per step, 1 in flight.",
    }
)
class GranularityField(serializers.JSONField):
    pass


def _parallel_unit() -> serializers.IntegerField:
    return serializers.IntegerField(min_value=0, max_value=PARALLEL_UNIT_MAX)


class FragmentChangeSerializer(serializers.Serializer):
    added_parallel_units = serializers.ListField(
        child=_parallel_unit(), required=False, help_text="PU numbers to add."
    )
    removed_parallel_units = serializers.ListField(
        child=_parallel_unit(), required=False, help_text="PU numbers to remove."
    )


class OperationRequestSerializer(serializers.Serializer):
    """Only added: scale out; only removed: scale in; as many added as removed: migrate.

    Validation is the data plane's parser itself: ``validated_data`` is an ``OperationRequest``
    and a refusal is its ``RescaleError`` (400 with the parser's code and reason)."""

    changes = serializers.DictField(
        child=FragmentChangeSerializer(),
        help_text="Per stateful fragment (by name: 1 to "
        f"{FRAGMENT_NAME_MAX_CHARS} ASCII letters, digits, '_', '-' or '.'), the PUs to add and "
        "to remove.",
    )
    strategy = serializers.ChoiceField(
        choices=STRATEGY_CHOICES, default=Strategy.LIVE, required=False
    )
    granularity = GranularityField(required=False)
    dry_run = serializers.BooleanField(
        default=False, required=False, help_text="Return the plan without acting."
    )
    weighted = serializers.BooleanField(
        default=False,
        required=False,
        help_text="Balance measured bytes per PU too, not only vnode counts (cures skew).",
    )
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX_CHARS,
        help_text="Why the operator asks: kept with the operation and in the audit trail.",
    )
    plan_id = serializers.RegexField(
        regex=f"^[0-9a-f]{{{PLAN_ID_CHARS}}}$",
        required=False,
        help_text="Start exactly the plan of this dry run (its answer's plan_id), with the "
        "same body but dry_run: refused with 409 plan_stale when it expired, was used, the body "
        "differs or a fragment's mapping moved since. Absent: plan now and start that.",
    )

    def to_internal_value(self, data: Any) -> Any:
        """``{"request": OperationRequest, "plan_id": str | None}``."""
        plan_id = None
        if isinstance(data, dict) and "plan_id" in data:
            data = dict(data)
            plan_id = plan_id_parse(data.pop("plan_id"))
        return {"request": OperationRequest.parse(data), "plan_id": plan_id}


# -- the plan (dry run; stored on each operation) -----------------------------------------------
class GranularitySerializer(serializers.Serializer):
    vnodes_per_step = serializers.IntegerField()
    max_keys_per_step = serializers.IntegerField(allow_null=True)
    max_bytes_per_step = serializers.IntegerField(allow_null=True)
    steps_in_flight = serializers.IntegerField()
    bytes_per_second = serializers.FloatField(allow_null=True)
    hot_vnodes = serializers.ChoiceField(choices=list(HOT_VNODES_ORDERS), allow_null=True)


class MoveSerializer(serializers.Serializer):
    fragment = serializers.CharField()
    vnode = serializers.IntegerField()
    source_pu = serializers.IntegerField()
    target_pu = serializers.IntegerField()
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()


class BalanceSerializer(serializers.Serializer):
    vnodes_per_pu = serializers.DictField(child=serializers.IntegerField())
    bytes_per_pu = serializers.DictField(child=serializers.IntegerField())
    max_vnodes_minus_min = serializers.IntegerField()
    max_bytes_over_mean = serializers.FloatField(allow_null=True)


class FragmentPlanSerializer(serializers.Serializer):
    fragment = serializers.CharField()
    kind = serializers.ChoiceField(choices=CHANGE_KIND_CHOICES)
    parallel_units_before = serializers.ListField(child=serializers.IntegerField())
    parallel_units_after = serializers.ListField(child=serializers.IntegerField())
    moves = MoveSerializer(many=True)
    vnodes_moved = serializers.IntegerField()
    keys_moved = serializers.IntegerField()
    bytes_moved = serializers.IntegerField()
    balance_before = BalanceSerializer()
    balance_after = BalanceSerializer()
    mapping_before = serializers.ListField(child=serializers.IntegerField())
    mapping_after = serializers.ListField(child=serializers.IntegerField())
    load = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text='Measured load per vnode: {"<vnode>": [keys, bytes]}.',
    )


class PuMovesSerializer(serializers.Serializer):
    parallel_unit = serializers.IntegerField()
    vnodes = serializers.IntegerField()
    keys = serializers.IntegerField()
    bytes = serializers.IntegerField()


class FragmentPlanSummarySerializer(serializers.Serializer):
    fragment = serializers.CharField()
    kind = serializers.ChoiceField(choices=CHANGE_KIND_CHOICES)
    parallel_units_before = serializers.ListField(child=serializers.IntegerField())
    parallel_units_after = serializers.ListField(child=serializers.IntegerField())
    vnodes_moved = serializers.IntegerField()
    keys_moved = serializers.IntegerField()
    bytes_moved = serializers.IntegerField()
    vnodes_cut = serializers.IntegerField(
        default=0,
        help_text="Hot vnodes over max_keys_per_step or max_bytes_per_step, moved key range by "
        "key range (only the range in flight is held).",
    )
    key_range_steps = serializers.IntegerField(
        default=0, help_text="The steps that move those vnodes' key ranges, one range each."
    )
    balance_before = BalanceSerializer()
    balance_after = BalanceSerializer()
    sources = PuMovesSerializer(
        many=True, help_text="Per source PU, by PU: the vnodes (keys, bytes) leaving it."
    )
    targets = PuMovesSerializer(
        many=True,
        help_text="Per target PU, by PU: the vnodes (keys, bytes) it takes. Each move, vnode "
        "by vnode, is in the operation once started (GET operations/{operation_id}).",
    )


class DryRunSerializer(serializers.Serializer):
    """A dry run's answer: a summary of the plan, and the ``plan_id`` that starts exactly it
    (the whole plan is kept on the server; its size grows with the PUs, not with the moves)."""

    strategy = serializers.ChoiceField(choices=STRATEGY_CHOICES)
    granularity = GranularitySerializer(
        help_text="The granularity the steps were cut by: the request's, with vnodes_per_step "
        "and steps_in_flight chosen from the plan's size where it left them out."
    )
    granularity_reason = serializers.CharField(
        help_text="Why the planner chose those figures; empty when the request set them."
    )
    fragments = serializers.DictField(child=FragmentPlanSummarySerializer())
    steps_total = serializers.IntegerField(help_text="Steps of the plan (0 with stop_start).")
    estimated_duration_s = serializers.FloatField()

    plan_id = serializers.CharField(
        help_text="Send it with the same body (without dry_run) to start exactly this plan."
    )
    expires_at = serializers.DateTimeField(help_text="The plan_id starts nothing after this.")
    mapping_versions = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Per fragment, the mapping version the plan was computed from: the plan is "
        "stale once one moves.",
    )

    def to_representation(self, instance: Any) -> Any:
        return {
            **instance.plan,
            "plan_id": instance.plan_id,
            "expires_at": serializers.DateTimeField().to_representation(instance.expires_at),
            "mapping_versions": instance.mapping_versions,
        }


@extend_schema_field(GranularitySerializer)
class StoredGranularityField(serializers.JSONField):
    pass


@extend_schema_field(OperationRequestSerializer)
class StoredRequestField(serializers.JSONField):
    """The request, put back together from the operation's columns (``request_record``)."""

    def get_attribute(self, instance: RescaleOperation) -> Any:
        return instance.request_record().to_json()


class OperationPlanSerializer(serializers.Serializer):
    """What an operation's plan says beyond its columns and steps: each fragment's plan and
    the estimate (its strategy and granularity are the operation's, its steps ``steps``)."""

    fragments = serializers.DictField(child=FragmentPlanSerializer())
    estimated_duration_s = serializers.FloatField()
    granularity_reason = serializers.CharField(
        required=False,
        help_text="Why the planner chose the operation's vnodes_per_step and steps_in_flight; "
        "empty when the request set them (absent on operations planned before it was kept).",
    )


@extend_schema_field(OperationPlanSerializer)
class PlanField(serializers.JSONField):
    """The plan as stored with the operation (``Plan.stored_json``): nothing another field of
    the document carries."""

    def get_attribute(self, instance: RescaleOperation) -> Any:
        return instance.plan


# -- operations ----------------------------------------------------------------------------------
class OperationSerializer(serializers.ModelSerializer):
    pipeline: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who asked."
    )
    cancel_requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who asked to cancel."
    )
    request = StoredRequestField(read_only=True)
    granularity = StoredGranularityField(read_only=True)
    fragments = serializers.ListField(child=serializers.CharField(), read_only=True)
    duration_s = serializers.FloatField(read_only=True, allow_null=True)
    steps_total = serializers.IntegerField(read_only=True)
    steps_done = serializers.IntegerField(read_only=True)

    class Meta:
        model = RescaleOperation
        fields = [
            "operation_id", "pipeline", "status", "strategy", "granularity", "fragments", "request",
            "reason", "requested_by", "cancel_requested_by", "created_at", "started_at", "finished_at",
            "duration_s", "outcome", "error_code", "vnodes_moved", "keys_moved", "bytes_moved",
            "steps_total", "steps_done",
        ]  # fmt: skip
        read_only_fields = fields


class StepSerializer(RowSerializer, serializers.ModelSerializer):
    """A step once: as planned (vnodes, PUs, keys, bytes) and as the runner last reported it;
    its vnodes' own figures are the document's ``vnodes``."""

    timings = serializers.DictField(
        child=serializers.FloatField(), read_only=True, help_text="phase -> unix time entered."
    )
    vnodes = serializers.ListField(child=serializers.IntegerField(), read_only=True)

    class Meta:
        model = RescaleStep
        list_serializer_class = RowListSerializer
        fields = [
            "step", "fragment", "source_pu", "target_pu", "vnodes", "key_range_index",
            "key_range_count", "phase", "keys", "bytes",
            "keys_moved", "bytes_moved", "hold_queue", "hold_bytes", "collect_epoch",
            "acquire_epoch",
            "drop_epoch", "timings", "error", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class OperationVnodeSerializer(RowSerializer):
    """A vnode of the operation: its step (whose PUs and phase are the step's) and its own
    figures."""

    fragment = serializers.CharField()
    vnode = serializers.IntegerField()
    step = serializers.IntegerField(help_text="The step that moves it (``steps[].step``).")
    routing = serializers.ChoiceField(
        choices=choices(Routing),
        help_text="Where the vnode's records go now: its source PU, the step's hold queue, "
        "or its target PU.",
    )
    key_range_index = serializers.IntegerField(
        allow_null=True,
        help_text="For a hot vnode cut by key, the key range the step moves (from 0; null: the "
        "whole vnode). The vnode then has a row per key range.",
    )
    key_range_count = serializers.IntegerField(allow_null=True)
    keys = serializers.IntegerField(allow_null=True)
    bytes = serializers.IntegerField(allow_null=True)
    hold_queue = serializers.IntegerField(help_text="Records held for it.")
    hold_bytes = serializers.IntegerField(help_text="Their bytes in the hold queue.")


class RunnerProgressSerializer(serializers.Serializer):
    """What the runner's last report says that no other field of the operation does."""

    status = serializers.ChoiceField(
        choices=OPERATION_STATUS_CHOICES,
        help_text="The runner's status of the operation (the operation's own ends once the "
        "orchestrator has seen it).",
    )
    phase = serializers.ChoiceField(
        choices=choices(StopStartPhase), help_text="A stop-start's phase (a live one: begun)."
    )
    cancel_requested = serializers.BooleanField()
    begun_epoch = serializers.IntegerField(allow_null=True)
    finished_epoch = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    executors = serializers.ListField(
        child=serializers.CharField(), help_text="Where a stop-start's Spark tasks ran."
    )
    hold_queue_full = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Steps whose hold queue reached its bound: the stream waits at the barrier "
        "until their exports are verified (waiting_for hold_queue_full).",
    )


class AuditEventSerializer(RowSerializer, serializers.ModelSerializer):
    actor_name = serializers.CharField(
        help_text='Who acted: a username, or the component ("orchestrator", "runner").'
    )
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)

    class Meta:
        model = AuditEvent
        list_serializer_class = RowListSerializer
        fields = [
            "id", "at", "actor_name", "action", "object_type", "object_id", "before", "after"
        ]  # fmt: skip
        read_only_fields = fields


class WaitingSerializer(serializers.Serializer):
    waiting_for = serializers.ChoiceField(
        choices=[w.value for w in WaitingFor],
        help_text="What the operation waits for now: an orchestrator to take it, the runner "
        "(down or silent), the next epoch barrier, exports in progress, its own pacing, or "
        "the exports of steps whose hold queue is full (the stream waits for them).",
    )
    detail = serializers.CharField(help_text="The same, in a sentence, with what to do if any.")
    stream_idle = serializers.BooleanField(
        help_text="No records in the last epoch: barriers come from the runner's empty epochs."
    )


class MovedSerializer(serializers.Serializer):
    planned = serializers.IntegerField(help_text="As the plan counted them at the start.")
    moved = serializers.IntegerField(help_text="Moved so far, arrivals included.")
    arrived = serializers.IntegerField(
        help_text="Of moved, those that arrived in a vnode while it moved (beyond the plan)."
    )
    share = serializers.FloatField(
        allow_null=True, help_text="Of the plan done (0..1, never over 1); null: nothing planned."
    )
    text = serializers.CharField(help_text="The same in words, as the console prints it.")


class OperationMovedSerializer(serializers.Serializer):
    keys = MovedSerializer()
    bytes = MovedSerializer()
    vnodes = MovedSerializer()


class OperationDetailSerializer(OperationSerializer):
    plan = PlanField(read_only=True)
    progress = serializers.SerializerMethodField(
        help_text="The runner's last report, beyond the steps and counters (null before it)."
    )
    steps = StepSerializer(many=True, read_only=True)
    vnodes = serializers.SerializerMethodField()
    events = serializers.SerializerMethodField()
    waiting = serializers.SerializerMethodField()
    moved = serializers.SerializerMethodField()

    class Meta(OperationSerializer.Meta):
        fields = [
            *OperationSerializer.Meta.fields, "progress_version", "waiting", "moved", "plan",
            "progress", "steps", "vnodes", "events",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(OperationMovedSerializer)
    def get_moved(self, op: RescaleOperation) -> dict[str, Any]:
        return moved_figures(op)

    @extend_schema_field(WaitingSerializer(allow_null=True))
    def get_waiting(self, op: RescaleOperation) -> dict[str, Any] | None:
        waiting = operation_waiting(op)
        return None if waiting is None else waiting.to_json()

    @extend_schema_field(RunnerProgressSerializer(allow_null=True))
    def get_progress(self, op: RescaleOperation) -> dict[str, Any] | None:
        if not op.progress:
            return None
        return dict(RunnerProgressSerializer(operation_runner_progress(op)).data)

    @extend_schema_field(OperationVnodeSerializer(many=True))
    def get_vnodes(self, op: RescaleOperation) -> list[Any]:
        return list(OperationVnodeSerializer(operation_vnodes(operation=op), many=True).data)

    @extend_schema_field(AuditEventSerializer(many=True))
    def get_events(self, op: RescaleOperation) -> list[Any]:
        return list(AuditEventSerializer(operation_events(operation=op), many=True).data)


# -- cluster information -------------------------------------------------------------------------
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


# -- workers -------------------------------------------------------------------------------------
def _refuse_unknown(data: Any, allowed: set[str]) -> None:
    if not isinstance(data, dict):
        raise errors.MalformedRequest("the request body must be a JSON object")
    unknown = set(data) - allowed
    if unknown:
        raise errors.MalformedRequest(
            f"unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
        )


class WorkerAddSerializer(serializers.Serializer):
    """Validation is the service's own (``cores_parse``): a refusal is 400 malformed_request."""

    cores = serializers.IntegerField(
        min_value=CORES_MIN,
        max_value=CORES_MAX,
        default=1,
        required=False,
        help_text="Cores of the new worker (its PUs: one per core by default).",
    )

    def to_internal_value(self, data: Any) -> Any:
        _refuse_unknown(data, {"cores"})
        return {"cores": cores_parse(data.get("cores", 1))}


class WorkerAddedSerializer(serializers.Serializer):
    provider = serializers.CharField(help_text="The worker provider (local, command).")
    cores = serializers.IntegerField()
    answer = serializers.CharField(help_text="What the provider started (also in the audit).")


class WorkerReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX_CHARS,
        help_text="Why the operator asks: kept in the audit trail.",
    )

    fields_allowed = {"reason"}

    def to_internal_value(self, data: Any) -> Any:
        _refuse_unknown(data, self.fields_allowed)
        reason = data.get("reason", "")
        if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
            raise errors.MalformedRequest(
                f"'reason' must be a text of at most {REASON_MAX_CHARS} characters"
            )
        return {
            "reason": reason,
            **{k: data[k] for k in self.fields_allowed - {"reason"} if k in data},
        }


class WorkerDrainSerializer(WorkerReasonSerializer):
    granularity = GranularityField(required=False)

    fields_allowed = {"reason", "granularity"}


class WorkerNoticeSerializer(WorkerReasonSerializer):
    """Validation is the service's own (``deadline_parse``): a refusal is 400."""

    deadline_s = serializers.FloatField(
        required=False,
        help_text="Seconds from now until the worker goes (1 to 86,400); default "
        "RESCALER_PREEMPTION_DEADLINE_S (120).",
    )

    fields_allowed = {"reason", "deadline_s"}

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if "deadline_s" in value:
            value["deadline_s"] = deadline_parse(value["deadline_s"])
        return value


class WorkerNoticedSerializer(serializers.Serializer):
    worker = WorkerInfoSerializer()
    operation = OperationDetailSerializer(
        allow_null=True,
        help_text="Its drain, started with priority (all at once); null when none started yet "
        "(see waiting_for and detail) or under RESCALER_PREEMPTION_POLICY=cordon.",
    )
    waiting_for = serializers.ListField(
        child=serializers.CharField(),
        help_text="Operations on its fragments asked to cancel: its drain starts when they end.",
    )
    detail = serializers.CharField(allow_blank=True, help_text="Why no drain started, if none.")


class WorkerDrainedSerializer(serializers.Serializer):
    worker = WorkerInfoSerializer()
    operation = OperationDetailSerializer(
        allow_null=True,
        help_text="The live operation that moves every vnode off it; null when no stateful "
        "fragment ran on it (it is decommissioning at once).",
    )


# -- one key -------------------------------------------------------------------------------------
class KeyQuerySerializer(serializers.Serializer):
    pipeline = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Needed only when two pipelines have a fragment of that name.",
    )


class KeyMigrationSerializer(serializers.Serializer):
    operation_id = serializers.CharField()
    step = serializers.IntegerField()
    source_pu = serializers.IntegerField()
    target_pu = serializers.IntegerField()
    phase = serializers.ChoiceField(choices=STEP_PHASE_CHOICES)
    routing = serializers.ChoiceField(choices=choices(Routing))


class KeyStateSerializer(serializers.Serializer):
    pipeline = serializers.CharField()
    fragment = serializers.CharField()
    key = serializers.CharField()
    vnode = serializers.IntegerField()
    parallel_unit = serializers.IntegerField(
        allow_null=True, help_text="The PU that owns the key's vnode."
    )
    mapping_version = serializers.IntegerField()
    exists = serializers.BooleanField(help_text="Whether the key has state.")
    value = serializers.JSONField(allow_null=True, help_text="The operator's state of the key.")
    as_of_epoch = serializers.IntegerField(
        allow_null=True,
        help_text="How fresh the answer is: the last epoch the owner's store had committed when "
        "it was read (null when the store holds no epoch yet or could not be read).",
    )
    state_error = serializers.CharField(
        allow_null=True,
        help_text="Why the state directory could not be read (then exists is false and vnode, "
        "parallel_unit and mapping_version come from Postgres).",
    )
    migration = KeyMigrationSerializer(
        allow_null=True, help_text="The step of an active operation moving this key's vnode."
    )
