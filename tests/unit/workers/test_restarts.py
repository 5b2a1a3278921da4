"""When the streaming query fails (``workers/restarts.py``): restart after a back-off, give up
after ``limit`` failures in a row (a query that committed an epoch since its start resets the
count), and wait out a full disk without counting it, for a while."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.restarts import QueryGivenUp, QueryRestarts, disk_full

ENOSPC = (
    "OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"
)


def test_gives_up_after_the_limit_of_failures_in_a_row(tmp_path: Path) -> None:
    r = QueryRestarts(limit=3, state_dir=tmp_path)
    assert [r.failed("executor lost", progressed=False) for _ in range(3)] == [2.0, 4.0, 8.0]
    with pytest.raises(QueryGivenUp, match="failed 4 times in a row; last: executor lost"):
        r.failed("executor lost", progressed=False)


def test_a_query_that_committed_an_epoch_starts_the_count_again(tmp_path: Path) -> None:
    r = QueryRestarts(limit=3, state_dir=tmp_path)
    for _ in range(10):  # weeks of running, a transient failure now and then
        assert r.failed("python worker exited", progressed=True) == 2.0
    assert r.failures == 1


def test_a_full_disk_is_waited_out_without_counting(tmp_path: Path) -> None:
    r = QueryRestarts(limit=1, state_dir=tmp_path, disk_full_patience_s=100)
    waits = [r.failed(ENOSPC, progressed=False) for _ in range(5)]
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0]
    assert r.failures == 0 and "the disk is full" in r.describe()
    # space was freed: the query ran and committed, then failed for another reason
    assert r.failed("executor lost", progressed=True) == 2.0
    assert r.disk_full_s == 0 and r.failures == 1


def test_a_disk_that_stays_full_stops_the_runner_with_what_to_do(tmp_path: Path) -> None:
    r = QueryRestarts(limit=3, state_dir=tmp_path, disk_full_patience_s=60)
    with pytest.raises(QueryGivenUp, match=r"stayed full .* free space there"):
        for _ in range(20):
            r.failed(ENOSPC, progressed=False)
    assert r.disk_full_s <= 60


@pytest.mark.parametrize(
    ("text", "full"),
    [
        (ENOSPC, True),
        ("java.io.IOException: No space left on device", True),
        ("lmdb.Error: mdb_put: ENOSPC", True),
        ("Connection refused", False),
    ],
)
def test_disk_full_is_read_from_python_and_jvm_messages(text: str, full: bool) -> None:
    assert disk_full(text) is full
