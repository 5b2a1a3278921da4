"""A share as a whole percent: one rule (``rescaler.percent.whole_percent``) for every figure the
console and the API give in percent (issue 48): the moved figures' words (``moved.*.text`` of
the API, the operation page), the PUs' locality (the matrix's filter, the workers table) and a
restore's progress (the snapshots API's ``percent``, its page).

Whole, rounded down and within 0..100: a percent never claims more than is done (16,383 of
16,384 vnodes moved is 99 %, not 100 %, while the operation still runs), nor passes 100 %. In
words, "–" when there is no share yet (nothing planned, no task counted), which is not 0 %.
"""

from __future__ import annotations

import pytest

from dashboard import format as console_format
from dashboard.tables import WorkerTable
from dashboard.templatetags import console
from rescaler.cluster.snapshot_records import RestoreProgressRecord
from rescaler.operations.selectors import Moved
from rescaler.percent import whole_percent

SHARES = [None, 0.0, 0.004, 0.29, 0.4995, 0.57, 0.58, 0.756, 0.996, 1.0, 1.2]


@pytest.mark.parametrize(
    ("share", "percent"),
    [
        (None, None),
        (0.0, 0),
        (0.004, 0),
        (0.29, 29),  # 28.999999999999996 in floating point
        (0.57, 57),
        (0.58, 58),
        (0.4995, 49),
        (0.756, 75),
        (0.996, 99),
        (16_383 / 16_384, 99),
        (1.0, 100),
        (1.2, 100),
        (-0.1, 0),
    ],
)
def test_a_share_is_a_whole_percent_rounded_down_within_0_and_100(
    share: float | None, percent: int | None
) -> None:
    assert whole_percent(share) == percent


def test_every_hundredth_is_its_own_percent() -> None:
    assert [whole_percent(n / 100) for n in range(101)] == list(range(101))


def test_in_words_none_is_a_dash_not_zero() -> None:
    assert [console_format.percent(s) for s in (None, 0.0, 0.756, 1.0, 1.2)] == [
        "–", "0 %", "75 %", "100 %", "100 %",
    ]  # fmt: skip


@pytest.mark.parametrize("share", SHARES)
def test_the_template_filter_and_the_workers_table_say_what_the_format_says(
    share: float | None,
) -> None:
    said = console_format.percent(share)
    assert console.percent(share) == said
    assert WorkerTable([]).render_locality(share) == said


@pytest.mark.parametrize(
    ("keys", "total", "percent"),
    [(0, 0, 0), (0, 7, 0), (29, 100, 29), (16_383, 16_384, 99), (5, 5, 100)],
)
def test_a_restore_s_percent_is_the_same_rule(keys: int, total: int, percent: int) -> None:
    assert RestoreProgressRecord("s", keys, total, ()).percent == percent


@pytest.mark.parametrize(
    ("moved", "text"),
    [
        (Moved(0, 0), "0 of 0"),  # nothing planned: no share, no percent
        (Moved(16_384, 16_383), "16,383 of 16,384 (99 %)"),
        (Moved(34_033, 17_000), "17,000 of 34,033 (49 %)"),
    ],
)
def test_the_moved_words_give_the_same_percent(moved: Moved, text: str) -> None:
    assert console_format.moved_text("vnodes", moved) == text
