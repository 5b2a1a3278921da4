"""The choice lists the OpenAPI schema's enums are named after."""

from __future__ import annotations

from rescaler.operations.models import choices
from workers.rescale.protocol import ChangeKind, OperationStatus, StepPhase, Strategy

# SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"] (rescaler/settings/base.py) names these choice
# lists. An override matches a field by its exact (value, label) pairs: the fields' choices are
# ``choices(<enum>)`` (the label is the value), so the override names the same list, not the enum
# class (whose labels drf-spectacular takes from the member names, and then matches nothing).
OPERATION_STATUS_CHOICES = choices(OperationStatus)  # RescaleOperation.status
STEP_PHASE_CHOICES = choices(StepPhase)  # RescaleStep.phase and the phases derived from it
STRATEGY_CHOICES = choices(Strategy)
CHANGE_KIND_CHOICES = choices(ChangeKind)  # a fragment plan's kind, whole or summed up
