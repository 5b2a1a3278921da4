"""A share as a whole percent, decided once for every figure given in percent: the moved
figures' words, the PUs' locality, a restore's progress (issue 48). A leaf: the cluster app (a
restore's progress) and the dashboard (its words) both import it."""

from __future__ import annotations

import math

# a share is a quotient in floating point: 0.29 * 100 is 28.999999999999996, which must still be
# 29 %. Far below any share a count can give (one in 10**9 would need a billion of something).
_FLOAT_SLACK = 1e-9


def whole_percent(share: float | None) -> int | None:
    """``share`` (0..1) as a whole percent, rounded down and within 0..100, so that it never
    claims more than is done (16,383 of 16,384 is 99 %, not 100 %) nor passes 100 % (keys that
    arrived during a move); None when there is no share (nothing planned, no task counted)."""
    if share is None:
        return None
    return min(max(math.floor(share * 100 + _FLOAT_SLACK), 0), 100)
