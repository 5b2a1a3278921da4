"""Rescale operations, their steps, and the dry runs' plans (the audit log is ``rescaler.audit``)."""

from __future__ import annotations

import enum
import json
import secrets
import uuid
import zlib
from typing import Any, cast

from django.conf import settings
from django.db import models

from workers.hashing import KeyRange
from workers.rescale.protocol import (
    FINAL,
    FragmentChange,
    Granularity,
    OperationRequest,
    OperationStatus,
    Plan,
    StepPhase,
    StepProgress,
    StepSpec,
    Strategy,
)


def new_operation_id() -> str:
    return uuid.uuid4().hex[:12]


PLAN_ID_CHARS = 32  # hex characters of a plan_id (128 random bits: not guessable)


def new_plan_id() -> str:
    return secrets.token_hex(PLAN_ID_CHARS // 2)


def choices(values: type[enum.StrEnum]) -> list[tuple[str, str]]:
    """A model field's choices from one of the protocol's enums (the one definition)."""
    return [(v.value, v.value) for v in values]


class RescaleOperation(models.Model):
    # the one public identifier: in URLs, bodies, events, audit object ids and runner payloads
    operation_id = models.CharField(
        max_length=32, unique=True, default=new_operation_id, editable=False
    )
    pipeline = models.ForeignKey(
        "cluster.Pipeline", on_delete=models.PROTECT, related_name="operations"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="rescale_operations",
    )
    # the request and its plan, each part stored once: strategy and granularity here, the
    # fragments' changes here, the steps as RescaleStep rows, the rest of the plan in ``plan``;
    # ``request_record``/``plan_record`` put the protocol's records back together
    changes = models.JSONField(default=dict)  # fragment -> FragmentChange.to_json()
    weighted = models.BooleanField(default=False)
    reason = models.TextField(blank=True)  # why the operator asked (also in the audit)
    strategy = models.CharField(max_length=16, choices=choices(Strategy))
    granularity = models.JSONField(default=dict)
    plan = models.JSONField(default=dict)  # Plan.stored_json(): fragments and the estimate
    fragments = models.JSONField(default=list)  # fragment names, for filtering
    status = models.CharField(
        max_length=16, choices=choices(OperationStatus), default=OperationStatus.PENDING
    )
    outcome = models.TextField(blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    # the runner's last report without its steps (they are the RescaleStep rows)
    progress = models.JSONField(default=dict, blank=True)
    vnodes_moved = models.PositiveIntegerField(default=0)
    keys_moved = models.BigIntegerField(default=0)
    bytes_moved = models.BigIntegerField(default=0)
    # one more at each progress report: the version of the operation's progress events (each
    # carries what changed since the one before), so a page knows when it missed one
    progress_version = models.PositiveBigIntegerField(
        default=0,
        help_text="The version of the operation's last progress event: one more at each report "
        "of the runner (0 before the first).",
    )
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # an orchestrator holds this lease while it drives the operation; another may take over
    # once it expires (a killed Celery worker)
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("rescale", "Can start and cancel rescale operations")]
        indexes = [models.Index(fields=["status", "-created_at"])]

    def __str__(self) -> str:
        return f"operation {self.operation_id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL

    def request_record(self) -> OperationRequest:
        """The request as it was accepted (never a dry run)."""
        return OperationRequest(
            changes={
                name: FragmentChange(
                    tuple(c["added_parallel_units"]), tuple(c["removed_parallel_units"])
                )
                for name, c in self.changes.items()
            },
            strategy=Strategy(self.strategy),
            granularity=Granularity(**self.granularity),
            weighted=self.weighted,
            reason=self.reason,
        )

    def plan_record(self) -> Plan:
        """The plan of the operation: the single source the orchestrator drives it from.

        An operation read without its plan (``defer("plan")``, as the drive loop reads the one
        it holds while it drives it) has it read here and not kept: the record holds the same,
        and the stored JSON, decoded (some 100,000 objects at 16,384 steps), would be walked by
        every full collection of the process as long as the operation is held."""
        if "plan" in self.get_deferred_fields():
            stored = type(self).objects.values_list("plan", flat=True).get(pk=self.pk)
        else:
            stored = self.plan
        steps = [s.spec() for s in self.steps.all()]
        return Plan.from_stored(self.request_record(), stored, sorted(steps, key=_number))

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at
        if end is None:
            from django.utils import timezone

            end = timezone.now()
        return (end - self.started_at).total_seconds()


class OperationFragment(models.Model):
    """The fragments an operation works on. While it is active, no other operation may take
    the same fragment: the partial unique constraint makes that a database rule."""

    operation = models.ForeignKey(
        RescaleOperation, on_delete=models.CASCADE, related_name="fragment_locks"
    )
    fragment = models.ForeignKey("cluster.Fragment", on_delete=models.CASCADE, related_name="+")
    active = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["fragment"],
                condition=models.Q(active=True),
                name="one_active_operation_per_fragment",
            )
        ]

    def __str__(self) -> str:
        return f"{self.operation.operation_id} holds {self.fragment}" + (
            "" if self.active else " (released)"
        )


class RescaleStep(models.Model):
    operation = models.ForeignKey(RescaleOperation, on_delete=models.CASCADE, related_name="steps")
    step = models.PositiveIntegerField()  # its number in the operation, from 1
    fragment = models.CharField(max_length=64)
    source_pu = models.PositiveIntegerField()
    target_pu = models.PositiveIntegerField()
    vnodes = models.JSONField()
    # a step of a hot vnode cut into key ranges moves range ``key_range_index`` of
    # ``key_range_count`` of its one vnode (both null: whole vnodes)
    key_range_index = models.PositiveIntegerField(null=True, blank=True)
    key_range_count = models.PositiveIntegerField(null=True, blank=True)
    phase = models.CharField(max_length=16, choices=choices(StepPhase), default=StepPhase.PLANNED)
    keys = models.BigIntegerField(default=0)  # as planned (interrogated)
    bytes = models.BigIntegerField(default=0)
    keys_moved = models.BigIntegerField(default=0)
    bytes_moved = models.BigIntegerField(default=0)
    hold_queue = models.BigIntegerField(default=0)  # records held
    hold_bytes = models.BigIntegerField(default=0)  # their bytes (the hold queue bounds count them)
    collect_epoch = models.BigIntegerField(null=True, blank=True)
    acquire_epoch = models.BigIntegerField(null=True, blank=True)
    drop_epoch = models.BigIntegerField(null=True, blank=True)
    per_vnode = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # the operation's progress_version that last wrote the row: who follows the operation reads
    # only the rows written since the version it saw (the orchestrator, at every tick)
    progress_version = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["operation", "step"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "step"], name="one_row_per_step")
        ]
        indexes = [
            models.Index(fields=["operation", "progress_version"], name="step_progress_version")
        ]

    def __str__(self) -> str:
        return f"step {self.step} of {self.operation.operation_id}: {self.phase}"

    @classmethod
    def planned(cls, operation: RescaleOperation, spec: StepSpec) -> RescaleStep:
        """The row of a planned step (the inverse of ``spec``)."""
        return cls(
            operation=operation,
            step=spec.step,
            fragment=spec.fragment,
            source_pu=spec.source_pu,
            target_pu=spec.target_pu,
            vnodes=list(spec.vnodes),
            key_range_index=None if spec.key_range is None else spec.key_range.index,
            key_range_count=None if spec.key_range is None else spec.key_range.count,
            keys=spec.keys,
            bytes=spec.bytes,
        )

    @property
    def key_range(self) -> KeyRange | None:
        if self.key_range_count is None or self.key_range_index is None:
            return None
        return KeyRange(self.key_range_index, self.key_range_count)

    def spec(self) -> StepSpec:
        """The step as planned."""
        return StepSpec(
            step=self.step,
            fragment=self.fragment,
            source_pu=self.source_pu,
            target_pu=self.target_pu,
            vnodes=tuple(self.vnodes),
            keys=self.keys,
            bytes=self.bytes,
            key_range=self.key_range,
        )

    def progress(self) -> StepProgress:
        """The step as the runner last reported it (the row stores the report's figures)."""
        return StepProgress(
            step=self.step,
            fragment=self.fragment,
            source_pu=self.source_pu,
            target_pu=self.target_pu,
            vnodes=tuple(self.vnodes),
            phase=StepPhase(self.phase),
            collect_epoch=self.collect_epoch,
            acquire_epoch=self.acquire_epoch,
            drop_epoch=self.drop_epoch,
            keys_moved=self.keys_moved,
            bytes_moved=self.bytes_moved,
            hold_queue=self.hold_queue,
            hold_bytes=self.hold_bytes,
            per_vnode=self.per_vnode,
            timings=self.timings,
            error=self.error,
            key_range=self.key_range,
        )


def _number(spec: StepSpec) -> int:
    return spec.step


class OperationPlan(models.Model):
    """A dry run's plan, kept so that starting it starts exactly it (docs/api.md, "A binding
    dry run"): bound to the request it answered and to the mapping versions of the fragments it
    was computed from, used once, and only until it expires. ``rescaler.operations.plans``
    decides whether it may still start."""

    plan_id = models.CharField(
        max_length=PLAN_ID_CHARS, unique=True, default=new_plan_id, editable=False
    )
    pipeline = models.ForeignKey("cluster.Pipeline", on_delete=models.CASCADE, related_name="+")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    request = models.JSONField()  # OperationRequest.to_json() as planned, dry_run false
    plan = models.JSONField()  # Plan.summary_json(): what the dry run answered
    # the whole plan: Plan.compact_json(), zlib-compressed JSON (``plan_record``). Written and
    # read as bytes: as jsonb, Postgres parsing some 300,000 numbers took longer than planning.
    # Empty in a plan kept before it existed, whose ``plan`` is the whole Plan.to_json().
    detail = models.BinaryField(default=b"", editable=False)
    mapping_versions = models.JSONField()  # fragment -> the mapping version planned against
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    # the operation it started: a plan starts one operation at most
    operation = models.OneToOneField(
        RescaleOperation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="started_from",
    )
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["expires_at"])]

    def __str__(self) -> str:
        return f"plan {self.plan_id}" + (" (used)" if self.used_at else "")

    def request_record(self) -> OperationRequest:
        return OperationRequest.parse(self.request)

    def plan_record(self) -> Plan:
        """The plan exactly as the dry run made it."""
        if self.detail:
            return Plan.from_compact(self.request_record(), plan_detail_load(self.detail))
        steps = [StepSpec.from_json(s) for s in self.plan["steps"]]
        return Plan.from_stored(self.request_record(), self.plan, steps)


def plan_detail_dump(plan: Plan) -> bytes:
    """``OperationPlan.detail`` of a plan: its compact JSON, compressed (level 1: a 2 MB plan
    in some 20 ms, to a tenth of its size)."""
    text = json.dumps(plan.compact_json(), separators=(",", ":"))
    return zlib.compress(text.encode(), 1)


def plan_detail_load(detail: bytes | memoryview) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(zlib.decompress(detail)))
