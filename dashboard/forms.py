"""The console's forms: Django forms, so a refusal lands on the field it concerns, from the
server's own validation (the same services and checks the API calls; no rule is repeated
here or in the browser)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import QueryDict

from rescaler.runner.workers.machines import cores_parse
from workers.rescale.errors import RescaleError
from workers.rescale.protocol import REASON_MAX_CHARS


def filter_params(query: QueryDict, times: tuple[str, ...]) -> QueryDict:
    """A list page's filter form as its FilterSet (the API's) reads it: the fields left empty
    dropped, and the browser's ``datetime-local`` times (``2026-11-01T09:30``, no seconds and
    no zone) given their seconds."""
    params = query.copy()
    for name in times:
        value = params.get(name, "")
        if len(value) == 16:
            params[name] = f"{value}:00"
    for name in [k for k, v in params.items() if v == ""]:
        del params[name]
    return params


class CancelForm(forms.Form):
    """Cancel an operation: steps being acquired finish, held steps go back to their source, no
    new step starts. The service (``rescaler.operations.cancel.operation_cancel``) decides
    whether it still can."""

    confirm = forms.BooleanField(
        label="Yes, cancel it: moves under way finish or go back, no new step starts",
        required=True,
        error_messages={"required": "Tick the box to confirm the cancel."},
    )


class AddWorkerForm(forms.Form):
    """One more worker from the provider; its cores are checked by the service's own parser
    (``cores_parse``), so the page and the API refuse the same values."""

    cores = forms.IntegerField(label="Cores", initial=1)

    def clean_cores(self) -> int:
        try:
            return cores_parse(self.cleaned_data["cores"])
        except RescaleError as refused:
            raise forms.ValidationError(f"{refused.code}: {refused}") from refused


class WorkerActionForm(forms.Form):
    """Cordon, uncordon or drain one worker, with a reason for the audit trail."""

    reason = forms.CharField(
        label="Reason (goes to the audit trail)",
        required=False,
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class DrainForm(WorkerActionForm):
    """Drain and remove: destructive once it completes, so it is confirmed, and the console
    asks why (the API's drain takes no reason as well: the service does not require one)."""

    reason = forms.CharField(
        label="Reason (goes to the audit trail)",
        required=True,
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "reason_required: say why: the reason goes to the audit trail"},
    )

    confirm = forms.BooleanField(
        label="Yes: move every vnode off it, then stop its executor and release its machine",
        required=True,
        error_messages={"required": "Tick the box to confirm the drain."},
    )


# what each worker action does, said before it is done (the page's words, once)
WORKER_ACTIONS: dict[str, dict[str, Any]] = {
    "cordon": {
        "title": "Cordon worker {worker}",
        "what": "No new vnodes go to the parallel units of {worker}; it keeps the vnodes it has. "
        "Uncordon undoes it.",
        "button": "Cordon {worker}",
        "done": "Cordoned {worker}.",
        "form": WorkerActionForm,
    },
    "uncordon": {
        "title": "Uncordon worker {worker}",
        "what": "The parallel units of {worker} may be given vnodes again.",
        "button": "Uncordon {worker}",
        "done": "Uncordoned {worker}.",
        "form": WorkerActionForm,
    },
    "drain": {
        "title": "Drain and remove worker {worker}",
        "what": "A live rescale moves every vnode off PUs {pus} of {worker}; when it completes the "
        "runner stops the executor and the worker provider releases its machine. Cancelling the "
        "operation stops the drain (the worker stays cordoned); once it completed, the worker "
        "is gone.",
        "button": "Drain and remove {worker}",
        "done": "Draining {worker}.",
        "form": DrainForm,
    },
}
