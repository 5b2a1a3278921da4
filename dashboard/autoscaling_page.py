"""The cluster page's autoscaling panels (docs/console.md, "Autoscaling"): per pipeline, the
recommendation (the decision, why, the figures it rests on, and "apply", which starts its bound
plan), the recent epochs' signals (a chart, and their numbers in a table) and the policy form.
All go through the services and selectors the API and ``/metrics`` use."""

from __future__ import annotations

from typing import Any

from django import forms

from dashboard.api.autoscaling import recommendation_json
from dashboard.cluster_tables import SignalEpochTable
from rescaler.autoscaling.figures import signal_series
from rescaler.autoscaling.model import MAX_PARALLEL_UNITS, Mode, Policy
from rescaler.autoscaling.recommendation import recommendation_get
from rescaler.autoscaling.selectors import autoscaling_policy_get, pipeline_get, policy_json


class AutoscalingPolicyForm(forms.Form):
    """The policy, every setting; the service checks the policy as a whole."""

    mode = forms.ChoiceField(
        choices=[(m.value, m.value) for m in Mode],
        help_text="off: nothing is decided; recommend: proposed here, started on Apply; "
        "auto: started by the autoscaler within the guard rails.",
    )
    target_utilisation = forms.FloatField(
        label="Target utilisation", help_text="Busy share of a PU's time, in (0, 1]."
    )
    min_parallel_units = forms.IntegerField(label="Min PUs per fragment", min_value=1)
    max_parallel_units = forms.IntegerField(
        label="Max PUs per fragment", min_value=1, max_value=MAX_PARALLEL_UNITS
    )
    max_step = forms.IntegerField(
        label="Max step", min_value=1, max_value=MAX_PARALLEL_UNITS, help_text="PUs per decision."
    )
    stabilisation_s = forms.FloatField(
        label="Stabilisation window (s)", help_text="Every epoch in it must agree."
    )
    cooldown_s = forms.FloatField(label="Cooldown (s)", help_text="After an operation ends.")
    catch_up_s = forms.FloatField(
        label="Catch-up time (s)", help_text="The backlog should be processed within it."
    )
    scale_in_blackout_hours = forms.CharField(
        label="No scale-in at (UTC hours)",
        required=False,
        help_text="e.g. 8, 9, 17",
    )

    def clean_scale_in_blackout_hours(self) -> list[int]:
        text = self.cleaned_data.get("scale_in_blackout_hours") or ""
        try:
            return [int(part) for part in text.replace(",", " ").split()]
        except ValueError:
            raise forms.ValidationError("whole hours, 0 to 23, separated by commas") from None

    @classmethod
    def of(cls, pipeline: str, policy: Policy) -> AutoscalingPolicyForm:
        initial = policy_json(policy)
        initial["scale_in_blackout_hours"] = ", ".join(map(str, policy.scale_in_blackout_hours))
        return cls(initial=initial, auto_id=auto_id(pipeline))


def auto_id(pipeline: str) -> str:
    """The form's element ids, one set per pipeline's panel (a page has one per pipeline)."""
    return f"id_autoscaling_{pipeline}_%s"


# epochs printed under each chart (the page without JavaScript reads them)
RECENT_EPOCHS = 10


def signal_charts(pipeline: str) -> list[dict[str, Any]]:
    """Per stateful fragment: the chart's columns, its script element's id, and the recent
    epochs with the table of them beside it."""
    charts = []
    for series in signal_series(pipeline=pipeline_get(name=pipeline)):
        recent = series.recent(RECENT_EPOCHS)
        charts.append(
            {
                "fragment": series.fragment,
                "script_id": f"signals-{pipeline}-{series.fragment}",
                "columns": series.columns(),
                "recent": recent,
                "recent_table": SignalEpochTable(recent, fragment=series.fragment),
                "epochs": len(series.epochs),
                "target_utilisation": series.target_utilisation,
            }
        )
    return charts


def autoscaling_panels(
    *, user: Any, pipelines: list[str], can_act: bool, bound: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One panel per pipeline: its recommendation now (planned when the user may start it), the
    charts of its signals, and its policy form (``bound``: the form a refused POST sends back, by pipeline)."""
    panels = []
    for name in pipelines:
        recommendation = recommendation_get(user=user, pipeline=name, plan=can_act)
        form = (bound or {}).get(name) or AutoscalingPolicyForm.of(
            name, autoscaling_policy_get(pipeline=pipeline_get(name=name))
        )
        panels.append(
            {
                "pipeline": name,
                "recommendation": recommendation_json(recommendation),
                "form": form,
                "signals": signal_charts(name),
                "can_act": can_act,
            }
        )
    return panels
