"""The console's table classes of ``dashboard.cluster_tables``, ``dashboard.recovery_tables`` and
``dashboard.plan_tables`` without a page: each one's columns, a row as it renders (the ids,
data attributes and classes the pages' scripts, live deltas and browser tests find rows by)
and an empty table's words. The pages around them are tested in test_console_*.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from html import unescape
from types import SimpleNamespace

import django_tables2 as tables
from django.test import RequestFactory
from django_tables2 import RequestConfig

from dashboard.cluster_tables import (
    ComponentTable,
    PastVersionTable,
    RunningOperationTable,
    SignalEpochTable,
)
from dashboard.operation_fragments import PlacementRow, SourceProgress
from dashboard.past_placement import PastRow
from dashboard.plan_tables import PlacementTable, PlanMoveTable, SourceProgressTable
from dashboard.recovery_tables import (
    LostStoreTable,
    RestoreProgressTable,
    SnapshotRequestTable,
    SnapshotTable,
    TaskRunTable,
)
from dashboard.rescale_page import PlanMove
from rescaler.autoscaling.figures import EpochFigures
from rescaler.cluster.snapshot_records import (
    LostStoreRecord,
    RestoreTaskProgress,
    RestoreTaskRecord,
    SnapshotRecord,
    SnapshotRequestRecord,
)

AT = dt.datetime(2026, 11, 21, 14, 5, 0, tzinfo=dt.UTC)


def html(table: tables.Table, query: str = "") -> str:
    request = RequestFactory().get(f"/{query}")
    RequestConfig(request, paginate=False).configure(table)
    return str(table.as_html(request))


def headers(table: tables.Table) -> list[str]:
    return [str(column.header) for column in table.columns]


def rows(page: str) -> list[tuple[str, list[str]]]:
    """Each body row: its opening tag's attributes, and its cells' text."""
    body = page[page.index("<tbody") :]
    found = []
    for attrs, inner in re.findall(r"<tr\s*([^>]*)>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", inner, re.S)
        found.append((attrs, [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells]))
    return found


def empty_row(page: str) -> str:
    """The one row of an empty table: its words, unescaped."""
    ((_, (text,)),) = rows(page)
    return unescape(text)


# -- the cluster page --------------------------------------------------------------------------
def test_components_table() -> None:
    table = ComponentTable(
        [{"name": "redis", "status": "down", "details": [("ping", "12 ms")], "error": "<gone>"}]
    )
    assert headers(table) == ["Component", "Status", "Details"]
    page = html(table)
    assert '<tbody id="components">' in page
    ((attrs, cells),) = rows(page)
    assert 'data-component="redis"' in attrs
    assert cells == ["redis", "down", "ping 12 ms &lt;gone&gt;"]
    assert '<td class="name">redis</td>' in page and '<span class="badge down">down</span>' in page
    assert '<span class="kv"><b>ping</b> 12 ms</span><div class="error">&lt;gone&gt;</div>' in page
    assert empty_row(html(ComponentTable([]))) == "No component is checked."


def test_running_operations_table() -> None:
    op = SimpleNamespace(
        operation_id="op-1",
        fragments=["word_count", "page_stats"],
        strategy="live",
        status="running",
        steps_done=1234,
        steps_total=2000,
    )
    table = RunningOperationTable([op])
    assert headers(table) == ["Operation", "Fragments", "Strategy", "Status", "Steps"]
    page = html(table)
    ((attrs, cells),) = rows(page)
    assert 'data-operation="op-1"' in attrs
    assert cells == ["op-1", "word_count, page_stats", "live", "running", "1,234 / 2,000"]
    assert '<a href="/operations/op-1/"><code>op-1</code></a>' in page
    assert '<progress max="2000" value="1234"></progress>' in page
    assert empty_row(html(RunningOperationTable([]))) == "None: the placement is at rest."


def test_past_versions_table_steps_with_the_page_s_query_string() -> None:
    asked = PastRow("word_count", "wc", 2, AT, None, "op-9", 1, None, None, asked=True)
    before_first = PastRow("page_stats", "wc", None, None, None, None, None, 1, None, asked=False)
    table = PastVersionTable([asked, before_first])
    assert headers(table) == ["Fragment", "Version", "Took effect", "Until", "Made by", "Step"]
    page = html(table, "?metric=keys&as_of=2026-11-21T14:05:00Z&cell=x")
    (first, second) = rows(page)
    assert 'data-fragment="word_count"' in first[0] and 'class="asked' in first[0]
    assert first[1][:5] == [
        "word_count wc",
        "v2",
        "2026-11-21 14:05:00",
        "in effect now",
        "operation op-9",
    ]
    assert re.sub(r"\s+", " ", first[1][5]) == "← v1 · newest"
    assert 'class="asked' not in second[0]
    assert second[1][:5] == ["page_stats wc", "none yet", "–", "–", "–"]
    # a link to another version keeps the page's own query but for the past and the cell
    assert 'href="?metric=keys&amp;fragment=word_count&amp;version=1&amp;pipeline=wc"' in page
    assert '<td class="made-by"><a href="/operations/op-9/">' in page
    assert '<time datetime="2026-11-21T14:05:00+00:00">' in page
    assert empty_row(html(PastVersionTable([]))) == "No stateful fragment had a mapping version."


def test_signal_epochs_table() -> None:
    epochs = [
        EpochFigures(59, 0.0, 2, 900.4, 500.0, 1000.0, 0.9, 1.0),
        EpochFigures(58, 0.0, 2, 880.0, None, None, None, 1.25),
    ]
    table = SignalEpochTable(epochs, fragment="word_count")
    assert headers(table) == [
        "Epoch",
        "PUs",
        "Input rate",
        "Capacity",
        "Per busy s per PU",
        "Busy",
        "Skew",
    ]
    page = html(table)
    assert '<table class="decisions signals-table" data-fragment="word_count">' in page
    assert '<caption class="hint">The last 2 epochs, newest first</caption>' in page
    (newest, older) = rows(page)
    assert 'data-epoch="59"' in newest[0]
    assert newest[1] == ["59", "2", "900/s", "1,000/s", "500", "90 %", "1.00"]
    assert older[1] == ["58", "2", "880/s", "not reported", "not reported", "not reported", "1.25"]
    assert "epoch, newest first" in html(SignalEpochTable(epochs[:1], fragment="f"))
    none = html(SignalEpochTable([], fragment="f"))
    assert empty_row(none) == "No epoch in the autoscaler's read window."


# -- the Snapshots page ------------------------------------------------------------------------
def test_snapshots_table() -> None:
    snapshot = SnapshotRecord(
        "snap-1", 1234, AT, 7200.0, 1.25, "manual", "<b>alice</b>", 4, 1600, 2_500_000,
        ("word_count",), ("executor-0", "executor-1"),
    )  # fmt: skip
    table = SnapshotTable([snapshot])
    assert headers(table) == [
        "Snapshot", "Epoch", "Taken", "Age", "Keys", "Bytes", "Duration", "Trigger",
        "Requested by", "Executors",
    ]  # fmt: skip
    page = html(table)
    ((attrs, cells),) = rows(page)
    assert attrs.startswith('data-snapshot="snap-1"')
    assert cells == [
        "snap-1", "1,234", "2026-11-21 14:05:00", "2 h 0 min ago", "1,600", "2,500,000",
        "1.2 s", "manual", "&lt;b&gt;alice&lt;/b&gt;", "executor-0, executor-1",
    ]  # fmt: skip
    assert '<td class="name"><code>snap-1</code></td>' in page
    assert '<td title="2.4\xa0MB">2,500,000</td>' in page
    nobody = dataclasses.replace(snapshot, requested_by="", executors=())
    assert rows(html(SnapshotTable([nobody])))[0][1][8:] == ["–", "–"]
    empty = SnapshotTable([], empty_text="No snapshot of wc yet.")
    assert empty_row(html(empty)) == "No snapshot of wc yet."


def test_restore_progress_table() -> None:
    tasks = [RestoreTaskProgress(0, "executor-0", "", 500, 1000, False)]
    table = RestoreProgressTable(tasks)
    assert headers(table) == ["PU", "Executor", "Host", "Keys", "Of", "Done"]
    page = html(table)
    assert 'class="components restore-progress"' in page
    assert rows(page)[0][1] == ["0", "executor-0", "–", "500", "1,000", "no"]
    assert empty_row(html(RestoreProgressTable([]))) == "No restore task has started yet."


def test_task_runs_table_is_named_by_its_kind() -> None:
    tasks = (RestoreTaskRecord(1, "", "host-1", 2000, 30_000, 0.75),)
    table = TaskRunTable(tasks, kind="rebuild-tasks", label="Rebuild tasks")
    assert headers(table) == ["PU", "Executor", "Host", "Keys", "Bytes", "Seconds"]
    page = html(table)
    assert '<table class="components rebuild-tasks" aria-label="Rebuild tasks">' in page
    assert rows(page)[0][1] == ["1", "–", "host-1", "2,000", "30,000", "0.75 s"]
    assert "<td ><code>–</code></td>" in page
    empty = TaskRunTable((), kind="restore-tasks", label="Restore tasks")
    assert empty_row(html(empty)) == "No task ran."


def test_lost_stores_table() -> None:
    table = LostStoreTable((LostStoreRecord("word_count", 2, "corrupt", "data.mdb <differs>"),))
    assert headers(table) == ["Fragment", "PU", "Found", "Detail"]
    page = html(table)
    assert 'aria-label="Lost stores"' in page
    assert rows(page)[0][1] == ["word_count", "2", "corrupt", "data.mdb &lt;differs&gt;"]
    assert empty_row(html(LostStoreTable(()))) == "No store was lost."


def test_snapshot_requests_table() -> None:
    asked = [
        SnapshotRequestRecord(AT, "operator", "before <the> deploy", 7, "done", "taken"),
        SnapshotRequestRecord(AT, "operator", "again", 8, "pending", ""),
        SnapshotRequestRecord(AT, "operator", "gone", None, "", ""),
    ]
    table = SnapshotRequestTable(asked)
    assert headers(table) == ["Requested", "By", "Reason", "Command", "Status", "Runner's answer"]
    page = html(table)
    done, pending, gone = rows(page)
    assert pending[1][4] == "pending"
    assert done[1] == [
        "2026-11-21 14:05:00",
        "operator",
        "before &lt;the&gt; deploy",
        "7",
        "done",
        "taken",
    ]
    assert '<span class="badge status-completed">done</span>' in page
    assert '<span class="badge status-pending">pending</span>' in page
    assert gone[1][3:5] == ["–", "–"]
    assert '<td class="reason">again</td>' in page
    assert empty_row(html(SnapshotRequestTable(()))) == "No snapshot was asked for."


# -- a rescale's plan and progress -------------------------------------------------------------
def test_plan_moves_table() -> None:
    table = PlanMoveTable([PlanMove("PU 0 → PU 2", "4", "1,000", "2.0 KB", "4–7")])
    assert headers(table) == ["Move", "Vnodes", "Keys", "Bytes", "Which"]
    page = html(table)
    assert 'class="components moves"' in page
    assert rows(page)[0][1] == ["PU 0 → PU 2", "4", "1,000", "2.0 KB", "4–7"]
    assert '<td class="which">4–7</td>' in page
    assert empty_row(html(PlanMoveTable([]))) == "No vnode moves."


def test_placement_table_is_headed_by_its_fragment() -> None:
    placed = [PlacementRow("word_count", 0, 8, 4, 8), PlacementRow("word_count", 2, 0, 4, 1)]
    table = PlacementTable(placed, fragment="word_count")
    assert headers(table) == ["word_count", "before", "planned", "now"]
    page = html(table)
    assert 'aria-label="vnodes per PU of word_count"' in page
    (unchanged, changed) = rows(page)
    # the rows a live delta swaps in by id
    assert unchanged[0].startswith('id="placement-word_count-0" data-pu="0"')
    assert unchanged[1] == ["PU 0", "8", "4", "8"] and changed[1] == ["PU 2", "0", "4", "1"]
    assert '<td class="num">8</td>' in page and '<td class="changed num">1</td>' in page
    assert headers(PlacementTable([]))[0] == "PU", "another table's header is not changed"
    assert empty_row(html(PlacementTable([], fragment="f"))) == "No PU is touched."


def test_source_progress_table() -> None:
    table = SourceProgressTable(
        [SourceProgress("word_count", 0, 2, 2), SourceProgress("wc", 1, 1, 3)]
    )
    assert headers(table) == ["Source", "Steps done"]
    page = html(table)
    assert '<tbody id="per-source">' in page
    (finished, going) = rows(page)
    assert finished[0].startswith('id="source-word_count-0"')
    assert finished[1] == ["word_count · PU 0", "2 / 2 steps done — done"]
    assert going[1] == ["wc · PU 1", "1 / 3 steps done"]
    assert '<progress max="3" value="1"></progress>' in page
    assert empty_row(html(SourceProgressTable([]))) == "No step: nothing to move."
