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

from dashboard.api.serializers.enums import STRATEGY_CHOICES
from rescaler.operations.models import PLAN_ID_CHARS
from rescaler.operations.plans import plan_id_parse
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
    Granularity,
    OperationRequest,
    Strategy,
)


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
