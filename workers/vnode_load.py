"""Each vnode's load as the stream measures it: records per epoch, smoothed over recent epochs.

The PU tasks count the records that arrived for each vnode in an epoch (``vnode_records`` in
their ``stat`` row, held records included: a vnode in flight still receives them). This keeps
an exponentially weighted mean per vnode, which the runner reports with each epoch and the
planner reads to order a live operation's steps by load ("hot vnodes", docs/rescale.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# the weight of the newest epoch: about the last ten epochs count
SMOOTHING = 0.2
# a vnode whose mean falls below this has stopped receiving records: it leaves the map
FORGOTTEN_BELOW = 0.01


class RecordsPerVnode:
    """fragment -> vnode -> mean records per epoch."""

    def __init__(self, smoothing: float = SMOOTHING) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], not {smoothing}")
        self.smoothing = smoothing
        self.means: dict[str, dict[int, float]] = {}

    def epoch(self, fragments: Iterable[str], stats: Iterable[Mapping[str, Any]]) -> None:
        """Fold one committed epoch's task stats in: a vnode no task counted had 0 records."""
        counted: dict[str, dict[int, int]] = {name: {} for name in fragments}
        for s in stats:
            per = counted.setdefault(s["fragment"], {})
            for vnode, n in s.get("vnode_records", {}).items():
                per[int(vnode)] = per.get(int(vnode), 0) + int(n)
        a = self.smoothing
        for name, now in counted.items():
            before = self.means.get(name, {})
            means: dict[int, float] = {}
            for vnode in before.keys() | now.keys():
                old = before.get(vnode)
                mean = (
                    float(now.get(vnode, 0)) if old is None else old + a * (now.get(vnode, 0) - old)
                )
                if mean >= FORGOTTEN_BELOW:
                    means[vnode] = mean
            self.means[name] = means

    def report(self) -> dict[str, dict[int, float]]:
        """The means, rounded to a tenth of a record (what an epoch report carries)."""
        return {
            name: {v: round(m, 1) for v, m in means.items()} for name, means in self.means.items()
        }
