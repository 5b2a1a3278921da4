"""Cluster metadata: pipelines, workers, parallel units, fragments and their vnode mappings.

Postgres is the source of truth the dashboard and the API read, and the channel between the
control plane and the runner: the runner registers its topology and reports every epoch here,
and reads the commands queued for it here (``RunnerCommand``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from workers.control import WorkerStatus

# a worker's status as a field's choices: the label is the value, so the API schema's enum
# (SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]) matches this very list
WORKER_STATUS_CHOICES = [(s.value, s.value) for s in WorkerStatus]


class PipelineQuerySet(models.QuerySet["Pipeline"]):
    def locked(self) -> PipelineQuerySet:
        """The rows locked until the transaction ends, FOR NO KEY UPDATE: lockers of a
        pipeline's row still wait for each other, but not a foreign-key check of a row that
        references it (KEY SHARE). With FOR UPDATE, a rescale request holding its fragments'
        rows and checking its operation's foreign key at commit, and an epoch report holding the
        pipeline's row and updating those fragments, each waited for the other."""
        return self.select_for_update(no_key=True)


class Pipeline(models.Model):
    class Status(models.TextChoices):
        STARTING = "starting"
        RUNNING = "running"
        STOPPING = "stopping"
        STOPPED = "stopped"

    name = models.CharField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTING)
    last_epoch = models.BigIntegerField(default=-1)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    spark = models.JSONField(default=dict, blank=True)
    # the runner's start, phase by phase, as its heartbeats tell it (workers/start_phases.py)
    start = models.JSONField(default=dict, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)
    # set by an operator for an earlier run's pipeline (rescaler.operations.pipeline_archive): the cluster
    # page, the rescale form and GET /cluster leave it out; its runner registering again clears it
    archived_at = models.DateTimeField(null=True, blank=True)

    objects = PipelineQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Worker(models.Model):
    """A compute host of the data plane: a Spark executor (in local mode the one local JVM).

    ``alive`` is what the runner last saw: the executor is registered with Spark (and the runner
    is not stopped). ``status`` is the control plane's view of its life (docs/elastic-workers.md):
    an operator's cordon or drain, and what the runner's reports made of it (lost, removed).
    """

    name = models.CharField(max_length=128, unique=True)
    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="workers")
    alive = models.BooleanField(default=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=WORKER_STATUS_CHOICES, default=WorkerStatus.ACTIVE.value
    )
    # why it has its status: the operator's words, or what the control plane saw
    status_reason = models.CharField(max_length=600, blank=True)
    executor_id = models.CharField(max_length=64, blank=True)  # Spark's ("driver" in local mode)
    host = models.CharField(max_length=255, blank=True)
    cores = models.PositiveIntegerField(default=0)
    # the first epoch whose barrier saw its PUs' stores created (-1: not yet, no vnode may go to
    # it); null for a worker only the registered topology named, whose PUs exist from the start
    bootstrapped_epoch = models.BigIntegerField(null=True, blank=True)
    joined_at = models.DateTimeField(null=True, blank=True)
    left_at = models.DateTimeField(null=True, blank=True)
    # the operation that drains it (status draining, and kept afterwards for the record)
    drain_operation_id = models.CharField(max_length=32, blank=True)
    # a preemption notice: when it came, when the worker says it goes, and who said so
    # (rescaler/runner/workers/notices.py)
    notice_at = models.DateTimeField(null=True, blank=True)
    notice_deadline = models.DateTimeField(null=True, blank=True)
    notice_origin = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["pipeline", "status"], name="worker_pipeline_status")]

    def __str__(self) -> str:
        return self.name


class ParallelUnit(models.Model):
    """One slot of compute, numbered globally, on one worker.

    ``last_executor``/``last_host`` say where its task really ran in the last counted epoch (the
    runner's truthful placement); ``tasks_home`` of ``tasks_total`` epochs ran on its own
    worker's executor: the locality figure. Each (epoch, PU) is counted once
    (``counted_epoch``), however many fragments run on the PU and however often the runner
    repeats its report.
    """

    class Status(models.TextChoices):
        ACTIVE = "active"
        LOST = "lost"  # its worker disappeared without a drain: its vnodes wait to be moved
        REMOVED = "removed"  # its worker was drained and decommissioned

    number = models.PositiveIntegerField(unique=True)
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="parallel_units")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    last_executor = models.CharField(max_length=64, blank=True)
    last_host = models.CharField(max_length=255, blank=True)
    tasks_total = models.PositiveBigIntegerField(default=0)
    tasks_home = models.PositiveBigIntegerField(default=0)
    counted_epoch = models.BigIntegerField(default=-1)

    class Meta:
        ordering = ["number"]

    def __str__(self) -> str:
        return f"PU {self.number}"


class Fragment(models.Model):
    class Kind(models.TextChoices):
        SOURCE = "source"
        STATEFUL = "stateful"
        SINK = "sink"

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="fragments")
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    position = models.PositiveSmallIntegerField(default=0)  # dataflow order
    region = models.PositiveSmallIntegerField(default=0)
    vnodes = models.PositiveIntegerField(null=True, blank=True)
    key = models.CharField(max_length=64, blank=True)
    # a processor's description names its state variables: longer than a built-in's name
    operator = models.TextField(blank=True)
    upstream = models.CharField(max_length=64, blank=True)
    # the fragment × PU matrix: which PUs this fragment runs on
    parallel_units = models.ManyToManyField(ParallelUnit, related_name="fragments", blank=True)
    mapping_version = models.PositiveIntegerField(default=0)
    # latest per-vnode load reported by the runner: {"<vnode>": [keys, bytes, records per epoch]}
    # (records: the stream's smoothed measure, ``workers.vnode_load``; older rows lack it)
    vnode_load = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["pipeline", "position"]
        constraints = [
            models.UniqueConstraint(fields=["pipeline", "name"], name="fragment_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.pipeline.name}/{self.name}"


class VnodeMapping(models.Model):
    """One version of a stateful fragment's vnode → PU mapping (``mapping[vnode]`` = PU number);
    the runner's ``workers.pipeline.placement.VnodeMapping`` holds the same."""

    fragment = models.ForeignKey(Fragment, on_delete=models.CASCADE, related_name="mappings")
    version = models.PositiveIntegerField()
    mapping = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["fragment", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["fragment", "version"], name="mapping_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.fragment} mapping v{self.version}"


class EpochMetric(models.Model):
    """What one committed epoch did, as the runner reported it."""

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="epochs")
    epoch = models.BigIntegerField()
    rows = models.BigIntegerField()
    malformed = models.BigIntegerField(default=0)
    malformed_samples = models.JSONField(default=list, blank=True)
    duration_s = models.FloatField()
    committed_at = models.DateTimeField()
    source_offset = models.JSONField(default=dict, blank=True)
    per_pu = models.JSONField(default=list, blank=True)
    mapping_versions = models.JSONField(default=dict, blank=True)
    # the records the source held past the epoch when it committed; null: not reported
    source_backlog = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["pipeline", "-epoch"]
        constraints = [models.UniqueConstraint(fields=["pipeline", "epoch"], name="epoch_unique")]
        indexes = [models.Index(fields=["pipeline", "-committed_at"])]

    def __str__(self) -> str:
        return f"{self.pipeline} epoch {self.epoch}"


class RunnerCommand(models.Model):
    """An instruction for the runner, taken at its next epoch boundary."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"
        FAILED = "failed"

    pipeline = models.ForeignKey(Pipeline, on_delete=models.CASCADE, related_name="commands")
    kind = models.CharField(max_length=32)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    detail = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["pipeline", "status"])]

    def __str__(self) -> str:
        return f"{self.kind} for {self.pipeline} ({self.status})"
