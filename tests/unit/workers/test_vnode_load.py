"""The vnodes' measured load: records per epoch, smoothed over epochs (``workers.vnode_load``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from workers import partials
from workers.vnode_load import FORGOTTEN_BELOW, RecordsPerVnode


def stat(fragment: str, counts: dict[int, int]) -> dict:
    return {"fragment": fragment, "vnode_records": {str(v): n for v, n in counts.items()}}


def test_the_first_epoch_is_taken_as_measured_then_each_epoch_weighs_its_share() -> None:
    meter = RecordsPerVnode(smoothing=0.5)
    meter.epoch(["f"], [stat("f", {1: 100, 2: 10}), stat("f", {3: 4})])
    assert meter.means == {"f": {1: 100.0, 2: 10.0, 3: 4.0}}
    # vnode 1 counted on two PUs (its own records and, as a target, records held for it)
    meter.epoch(["f"], [stat("f", {1: 150}), stat("f", {1: 50, 4: 8})])
    assert meter.means["f"] == {1: 150.0, 2: 5.0, 3: 2.0, 4: 8.0}


def test_a_vnode_that_stops_receiving_records_fades_and_is_forgotten() -> None:
    meter = RecordsPerVnode(smoothing=0.5)
    meter.epoch(["f"], [stat("f", {7: 1})])
    epochs = 0
    while 7 in meter.means["f"]:
        meter.epoch(["f"], [])  # a fragment with no task stats this epoch: every vnode 0
        epochs += 1
    assert epochs == 7 and 2.0**-6 >= FORGOTTEN_BELOW > 2.0**-7


def test_fragments_are_kept_apart_and_the_report_rounds_to_a_tenth() -> None:
    meter = RecordsPerVnode(smoothing=0.2)
    meter.epoch(["a", "b"], [stat("a", {0: 3}), stat("b", {0: 1})])
    meter.epoch(["a", "b"], [stat("a", {0: 4})])
    assert meter.report() == {"a": {0: 3.2}, "b": {0: 0.8}}


@pytest.mark.parametrize("smoothing", [0, -0.1, 1.5])
def test_a_smoothing_outside_0_1_is_refused(smoothing: float) -> None:
    with pytest.raises(ValueError, match="smoothing"):
        RecordsPerVnode(smoothing)


def test_records_per_vnode_counts_rows_or_the_records_partial_rows_stand_for() -> None:
    rows = pa.table({"vnode": [3, 1, 3, 3], "seq": [0, 1, 2, 3]})
    assert partials.records_per_vnode(rows) == {3: 3, 1: 1}
    folded = pa.table({"vnode": [3, 1, 3], partials.RECORDS: [5, 2, 1]})
    assert partials.records_per_vnode(folded) == {3: 6, 1: 2}
