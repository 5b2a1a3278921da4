"""A pipeline's autoscaling policy (docs/autoscaling.md): one row per pipeline, written only by
``rescaler.autoscaling.services.autoscaling_policy_update`` (validated and audited). A pipeline
without a row has the default policy, mode off."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from rescaler.autoscaling.model import Mode, Policy

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
