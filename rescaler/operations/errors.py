"""The operations app's own refusals, beside the protocol's ``RescaleError`` codes: a leaf that
every module of the app (requests, cancel) and the API's error handler import."""

from __future__ import annotations

from workers.rescale import errors


class OperationError(errors.RescaleError):
    """Base of the control plane's own refusals (beside the protocol's RescaleError codes)."""


class OperationFinal(OperationError):
    code = "operation_final"
