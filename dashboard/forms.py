"""The console's forms: Django forms, so a refusal lands on the field it concerns, from the
server's own validation (the same services and checks the API calls; no rule is repeated
here or in the browser)."""

from __future__ import annotations

from django import forms


class CancelForm(forms.Form):
    """Cancel an operation: steps in flight finish, no new step starts. The service
    (``rescaler.operations.requests.operation_cancel``) decides whether it still can."""

    confirm = forms.BooleanField(
        label="Yes, cancel it: steps in flight finish, no new step starts",
        required=True,
        error_messages={"required": "Tick the box to confirm the cancel."},
    )
