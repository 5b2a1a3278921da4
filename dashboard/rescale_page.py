"""The Rescale page: a Django form whose body is the API's own request, previewed as a dry run
and started by its ``plan_id``, so the page has no rules of its own: the service
(``rescaler.operations.requests.operation_request``) parses, validates and plans it, and its
refusals land on the field the API names (``dashboard.api.errors.field_of``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from django import forms

from dashboard.api.errors import field_of
from dashboard.format import count, size, vnode_ranges
from dashboard.plan_tables import PlanMoveTable
from workers.rescale.errors import RescaleError
from workers.rescale.protocol import PRESETS as GRANULARITY_PRESETS
from workers.rescale.protocol import REASON_MAX_CHARS, Granularity

PRESETS = (
    ("auto", "auto — chosen from the plan's size (the preview says what, and why)"),
    ("fluid", "fluid — one vnode per step: flattest latency, longest"),
    ("batched", "batched — 8 vnodes per step, 2 in flight"),
    ("all_at_once", "all at once — fastest, one spike"),
    ("custom", "custom (the figures below)"),
)
CUSTOM = (
    "vnodes_per_step",
    "steps_in_flight",
    "max_keys_per_step",
    "max_bytes_per_step",
    "bytes_per_second",
)
# ``granularity.hot_vnodes``: the order of the moves by the vnodes' measured load ("" is null)
HOT_VNODES = (
    ("first", "hottest vnodes first — their load leaves its PU soonest"),
    ("last", "hottest vnodes last"),
    ("", "by vnode number"),
)
# the API's field of a refusal -> the form's field that shows it
FORM_FIELD = {
    "changes": "fragment",
    "added_parallel_units": "add",
    "removed_parallel_units": "remove",
}


class RescaleForm(forms.Form):
    fragment = forms.ChoiceField(label="Fragment")
    target = forms.IntegerField(
        label="Number of parallel units",
        required=False,
        min_value=1,
        help_text="Ticks the PUs for you when none is ticked: adds the open PUs with the lowest "
        "numbers, or removes the highest. Or tick PUs yourself: only added is a scale-out, only "
        "removed a scale-in, as many added as removed a migration.",
    )
    add = forms.TypedMultipleChoiceField(
        label="Add parallel units", coerce=int, required=False, widget=forms.CheckboxSelectMultiple
    )
    remove = forms.TypedMultipleChoiceField(
        label="Remove parallel units",
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    strategy = forms.ChoiceField(
        label="Strategy",
        choices=(
            ("live", "live — records keep flowing; only moving vnodes wait"),
            ("stop_start", "stop-start — the stream pauses at one barrier"),
        ),
        initial="live",
        widget=forms.RadioSelect,
    )
    preset = forms.ChoiceField(label="Granularity (live)", choices=PRESETS, initial="auto")
    hot_vnodes = forms.ChoiceField(
        label="Order of moves",
        choices=HOT_VNODES,
        initial=Granularity().hot_vnodes,
        required=False,
        help_text="By each vnode's records per epoch, as the stream measured them.",
    )
    vnodes_per_step = forms.IntegerField(label="vnodes per step", required=False, initial=4)
    steps_in_flight = forms.IntegerField(label="steps in flight", required=False, initial=2)
    max_keys_per_step = forms.IntegerField(label="max keys per step", required=False)
    max_bytes_per_step = forms.IntegerField(label="max bytes per step", required=False)
    bytes_per_second = forms.IntegerField(label="bytes per second", required=False)
    weighted = forms.BooleanField(
        label="balance measured bytes too, not only vnode counts (cures skew)", required=False
    )
    reason = forms.CharField(
        label="Reason (goes to the audit trail)",
        max_length=REASON_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 2}),
        error_messages={"required": "reason_required: say why: the reason goes to the audit trail"},
    )
    plan_id = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(
        self,
        *args: Any,
        fragments: list[dict[str, Any]],
        running: set[str],
        parallel_units: list[Any],
        open_pus: set[int],
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)
        self.fragments = {f["name"]: f for f in fragments}
        self.open_pus = open_pus
        cast(forms.ChoiceField, self.fields["fragment"]).choices = [
            (
                f["name"],
                f"{f['name']} ({f['pipeline']}) — on PUs {vnode_ranges(f['parallel_units'])}"
                + (f" — busy with {f['busy_with']}" if f.get("busy_with") else "")
                + ("" if f["pipeline"] in running else " — not running"),
            )
            for f in fragments
        ]
        label = {c.pu: f"PU {c.pu} ({c.worker}, {c.state})" for c in parallel_units}
        for name in ("add", "remove"):
            cast(forms.ChoiceField, self.fields[name]).choices = [
                (pu, label[pu]) for pu in sorted(label)
            ]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None
        fragment = self.fragments.get(data.get("fragment") or "")
        target = data.get("target")
        if fragment is not None and target and not data.get("add") and not data.get("remove"):
            pus = sorted(int(p) for p in fragment["parallel_units"])
            if target > len(pus):
                free = [p for p in sorted(self.open_pus) if p not in pus]
                data["add"] = free[: target - len(pus)]
            elif target < len(pus):
                data["remove"] = pus[target:]
        return data

    def ticked(self, name: str) -> set[int]:
        """The PUs ticked in ``add`` or ``remove`` as sent (kept on a refused form too)."""
        if not self.is_bound:
            return set()
        values = self.data.getlist(name) if hasattr(self.data, "getlist") else []
        return {int(v) for v in values if str(v).isdigit()}

    def body(self, *, dry_run: bool) -> dict[str, Any]:
        """The API's request body (``POST /api/v1/operations``) of this form."""
        data = self.cleaned_data
        granularity: Any = data["preset"]
        if granularity == "custom":
            granularity = {k: data[k] for k in CUSTOM if data.get(k) is not None}
        order = data.get("hot_vnodes") or None
        if order != Granularity().hot_vnodes:  # a preset is a name: sent as its figures
            if isinstance(granularity, str):
                granularity = GRANULARITY_PRESETS[granularity].to_json()
            granularity["hot_vnodes"] = order
        return {
            "changes": {
                data["fragment"]: {
                    "added_parallel_units": list(data.get("add") or []),
                    "removed_parallel_units": list(data.get("remove") or []),
                }
            },
            "strategy": data["strategy"],
            "granularity": granularity,
            "weighted": bool(data.get("weighted")),
            "reason": data["reason"].strip(),
            "dry_run": dry_run,
        }

    def refuse(self, refusal: RescaleError) -> None:
        """The service's refusal on the field the API says it concerns, else on the form."""
        field = FORM_FIELD.get(field_of(refusal) or "")
        self.add_error(field, f"{refusal.code}: {refusal}")


class PlanMove(NamedTuple):
    """The vnodes a plan moves from one PU to another, in words."""

    move: str
    vnodes: str
    keys: str
    bytes: str
    which: str


@dataclass(frozen=True)
class PlanFragment:
    name: str
    summary: str
    pus: tuple[int, ...]
    now: tuple[str, ...]
    after: tuple[tuple[str, str], ...]  # (text, css class)
    moves: tuple[PlanMove, ...]

    @property
    def moves_table(self) -> PlanMoveTable:
        return PlanMoveTable(self.moves)


def _skew(balance: dict[str, Any]) -> str:
    value = balance.get("max_bytes_over_mean")
    return "–" if value is None else f"{value:.2f}"


def _order_text(granularity: Any) -> str:
    """In what order the steps go (``granularity.hot_vnodes``), as the preview says it."""
    order = granularity.get("hot_vnodes") if isinstance(granularity, dict) else None
    if order == "first":
        return ", the hottest vnodes first"
    if order == "last":
        return ", the hottest vnodes last"
    return ", by vnode number"


def plan_view(
    plan: dict[str, Any],
    transfers: dict[str, list[tuple[int, int, list[int], int, int]]] | None = None,
) -> dict[str, Any]:
    """A dry run's answer (``DryRunSerializer``) as the page shows it: per fragment the vnodes
    per PU now and after, the moves grouped by source and target with the vnodes each moves
    (``transfers``, from the kept plan: ``plans.plan_transfers``), and the estimate."""
    fragments = []
    for name, frag in (plan.get("fragments") or {}).items():
        before = {int(k): v for k, v in frag["balance_before"]["vnodes_per_pu"].items()}
        after = {int(k): v for k, v in frag["balance_after"]["vnodes_per_pu"].items()}
        pus = tuple(sorted(set(before) | set(after)))
        cells = []
        for pu in pus:
            if pu not in after:
                cells.append(("—", "ghost gone"))
                continue
            delta = after[pu] - before.get(pu, 0)
            sign = f" ({'+' if delta > 0 else ''}{delta})" if delta else ""
            css = "" if not delta else f"ghost {'gain' if delta > 0 else 'loss'}"
            cells.append((f"{after[pu]}{sign}", css))
        moves = tuple(
            PlanMove(f"PU {s} → PU {t}", count(len(v)), count(k), size(b), vnode_ranges(v))
            for s, t, v, k, b in (transfers or {}).get(name, [])
        )
        summary = (
            f"{frag['kind'].replace('_', ' ')}: {count(frag['vnodes_moved'])} vnodes move, "
            f"{count(frag['keys_moved'])} keys, {size(frag['bytes_moved'])}. Balance: vnodes max − "
            f"min {frag['balance_before']['max_vnodes_minus_min']} → "
            f"{frag['balance_after']['max_vnodes_minus_min']}, bytes max / mean "
            f"{_skew(frag['balance_before'])} → {_skew(frag['balance_after'])}."
        )
        if frag.get("vnodes_cut"):
            summary += (
                f" {count(frag['vnodes_cut'])} hot vnodes over the step's key or byte cap move "
                f"key range by key range, in {count(frag['key_range_steps'])} steps."
            )
        fragments.append(
            PlanFragment(
                name,
                summary,
                pus,
                tuple(count(before.get(pu, 0)) for pu in pus),
                tuple(cells),
                moves,
            )
        )
    steps = int(plan.get("steps_total") or 0)
    live = plan.get("strategy") == "live"
    reason = plan.get("granularity_reason") or ""
    estimate = (
        f"{count(steps)} steps{_order_text(plan.get('granularity'))}"
        + (f" ({reason})" if reason else "")
        if live
        else "one barrier (stop-start)"
    ) + f"; estimated duration {float(plan.get('estimated_duration_s') or 0):.1f} s."
    return {
        "fragments": fragments,
        "estimate": estimate,
        "plan_id": plan.get("plan_id"),
        "expires_at": plan.get("expires_at"),
    }
