"""The key finder of the cluster and operation pages, on the server: a GET form
(``?kf=<fragment>&key=<key>``) answered by the selector the API's
``GET /api/v1/fragments/<fragment>/keys/<key>`` uses, as rows of facts (the way into one vnode:
hash → vnode → the PU that owns it now → where it is going if it moves → its state)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.http import QueryDict

from dashboard.api.errors import ApiError
from dashboard.api.selectors.keys import fragment_get, key_state
from workers.rescale.errors import RescaleError


def _shown(value: Any) -> str:
    return json.dumps(value, default=str)


def _processor_rows(value: dict[str, Any], prefix: str) -> list[tuple[str, str]]:
    """A StatefulProcessor's state ({state: {variable: {kind, ...}}, timers}): one row per
    state variable, one for its pending timers."""
    rows = []
    for name, variable in value["state"].items():
        kind = variable.get("kind")
        if kind == "value":
            shown = _shown(variable.get("value"))
        elif kind == "list":
            shown = f"list of {len(variable['values'])}: {_shown(variable['values'])}"
        else:
            shown = f"map of {len(variable['entries'])}: {_shown(variable['entries'])}"
        rows.append((f"{prefix}{name}", shown))
    timers = ", ".join(
        dt.datetime.fromtimestamp(t / 1000, tz=dt.UTC).isoformat() for t in value["timers"]
    )
    rows.append((f"{prefix}timers", timers or "none"))
    return rows


def _is_processor_state(value: Any) -> bool:
    return isinstance(value, dict) and "state" in value and "timers" in value


def _state_rows(answer: dict[str, Any]) -> list[tuple[str, str]]:
    if not answer["exists"]:
        return [("state", answer.get("state_error") or "no state yet")]
    value = answer["value"]
    if _is_processor_state(value):
        return _processor_rows(value, "")
    if isinstance(value, dict) and value and all(map(_is_processor_state, value.values())):
        return [row for op, v in value.items() for row in _processor_rows(v, f"{op} · ")]
    return [("state", _shown(value))]


def key_finder(query: QueryDict, fragments: list[str]) -> dict[str, Any]:
    """The finder's form values and, when a key was asked for, its facts or the refusal."""
    fragment = query.get("kf") or (fragments[0] if fragments else "")
    key = query.get("key", "")
    found: dict[str, Any] = {"fragment": fragment, "key": key, "facts": None, "error": None}
    if "key" not in query:
        return found
    if not key:
        found["error"] = "malformed_request: type a key"
        return found
    try:
        answer = key_state(fragment=fragment_get(name=fragment), key=key)
    except (ApiError, RescaleError) as refused:
        code = getattr(refused, "error_code", None) or getattr(refused, "code", "refused")
        found["error"] = f"{code}: {getattr(refused, 'detail', refused)}"
        return found
    moving = answer["migration"]
    owner = answer["parallel_unit"]
    found["facts"] = [
        ("key", answer["key"]),
        ("vnode", f"{answer['vnode']} (mapping v{answer['mapping_version']})"),
        ("owner now", "–" if owner is None else f"PU {owner}"),
        (
            "as of",
            "no committed epoch yet"
            if answer["as_of_epoch"] is None
            else f"epoch {answer['as_of_epoch']} (the owner's last commit when read)",
        ),
        (
            "moving",
            (
                f"PU {moving['source_pu']} → PU {moving['target_pu']}, {moving['phase']} (records "
                f"go to {moving['routing']}), step {moving['step']} of operation "
                f"{moving['operation_id']}"
            )
            if moving
            else "no",
        ),
        *_state_rows(answer),
    ]
    return found
