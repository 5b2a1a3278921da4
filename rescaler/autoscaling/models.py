"""A pipeline's autoscaling policy (docs/autoscaling.md): one row per pipeline, written only by
``rescaler.autoscaling.services.autoscaling_policy_update`` (validated and audited). A pipeline
without a row has the default policy, mode off. And the history of its decisions."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from rescaler.autoscaling.model import DecisionKind, Mode, Policy
from rescaler.operations.models import PLAN_ID_CHARS, choices

MODE_CHOICES = [(m.value, m.value) for m in Mode]


class AutoscalingPolicy(models.Model):
    pipeline = models.OneToOneField(
        "cluster.Pipeline", on_delete=models.CASCADE, related_name="autoscaling_policy"
    )
    mode = models.CharField(max_length=16, choices=MODE_CHOICES, default=Mode.OFF.value)
    target_utilisation = models.FloatField(default=Policy.target_utilisation)
    min_parallel_units = models.PositiveIntegerField(default=Policy.min_parallel_units)
    max_parallel_units = models.PositiveIntegerField(default=Policy.max_parallel_units)
    max_step = models.PositiveIntegerField(default=Policy.max_step)
    stabilisation_s = models.FloatField(default=Policy.stabilisation_s)
    cooldown_s = models.FloatField(default=Policy.cooldown_s)
    catch_up_s = models.FloatField(default=Policy.catch_up_s)
    # UTC hours (0-23) at which no scale-in is proposed
    scale_in_blackout_hours = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # when the pipeline's epochs last queued an evaluation (``evaluation.evaluation_due``): at
    # most one per RESCALER_AUTOSCALING_INTERVAL_S; not a setting of the policy
    evaluation_queued_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name_plural = "autoscaling policies"

    def __str__(self) -> str:
        return f"{self.pipeline} autoscaling ({self.mode})"

    def policy(self) -> Policy:
        """The decision model's record of this row."""
        return Policy(
            mode=Mode(self.mode),
            target_utilisation=self.target_utilisation,
            min_parallel_units=self.min_parallel_units,
            max_parallel_units=self.max_parallel_units,
            max_step=self.max_step,
            stabilisation_s=self.stabilisation_s,
            cooldown_s=self.cooldown_s,
            catch_up_s=self.catch_up_s,
            scale_in_blackout_hours=tuple(self.scale_in_blackout_hours or ()),
        )


class AutoscalingDecision(models.Model):
    """One decision of the autoscaler for a pipeline, with the signals it rests on and what
    came of it. Written by ``rescaler.autoscaling.decisions`` only: a row when the decision
    differs from the pipeline's last one (not one per look), its outcome as it is acted on."""

    class Outcome(models.TextChoices):
        NONE = "none"  # no change: nothing to act on
        PROPOSED = "proposed"  # shown as the recommendation; waits for "apply"
        APPLIED = "applied"  # an operator started its plan (applied_by)
        STARTED = "started"  # auto mode started its plan by itself
        SUPERSEDED = "superseded"  # another decision came before it was acted on
        REFUSED = "refused"  # auto mode could not start it (outcome_reason, error_code)
        # the worker provider was asked for the PUs it needs; it starts once they joined
        AWAITING_WORKERS = "awaiting_workers"
        FAILED = "failed"  # the workers asked for did not join in time (outcome_reason)

    pipeline = models.ForeignKey(
        "cluster.Pipeline", on_delete=models.CASCADE, related_name="autoscaling_decisions"
    )
    decided_at = models.DateTimeField()
    mode = models.CharField(max_length=16, choices=MODE_CHOICES)
    kind = models.CharField(max_length=16, choices=choices(DecisionKind))
    reasons = models.JSONField(default=list)
    # per stateful fragment, as the recommendation answers it (``decisions.fragment_json``):
    # PUs now, after and needed, the predicted utilisation, and the estimate's signals
    fragments = models.JSONField(default=list)
    missing_signals = models.JSONField(default=dict)
    # the body of POST /api/v1/operations that applies it (null: nothing to apply)
    request = models.JSONField(null=True, blank=True)
    plan_id = models.CharField(max_length=PLAN_ID_CHARS, blank=True)  # the plan it started from
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PROPOSED)
    outcome_reason = models.TextField(blank=True)
    error_code = models.CharField(max_length=64, blank=True)  # of a refusal
    outcome_at = models.DateTimeField(null=True, blank=True)
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # the one ask of the worker provider for the PUs it needed (``provisioning``): how many
    # workers it gave (0: it refused) and when; never asked again for the same decision
    workers_requested = models.PositiveIntegerField(default=0)
    workers_requested_at = models.DateTimeField(null=True, blank=True)
    # the workers its completed scale-in emptied, drained and removed (``provisioning``)
    workers_released = models.JSONField(default=list, blank=True)
    # the operation it started, whose status says how it ended
    operation = models.ForeignKey(
        "operations.RescaleOperation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="autoscaling_decisions",
    )

    class Meta:
        ordering = ["-decided_at", "-id"]
        indexes = [models.Index(fields=["pipeline", "-decided_at"], name="decision_pipeline_time")]

    def __str__(self) -> str:
        return (
            f"{self.pipeline} {self.kind} at {self.decided_at:%Y-%m-%d %H:%M:%S} ({self.outcome})"
        )
