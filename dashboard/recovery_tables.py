"""The Snapshots page's tables as django-tables2 classes (``dashboard.tables`` has the other
pages'): the snapshots, a restore's tasks in progress, the Spark tasks of a restore or a
rebuild, the lost stores a rebuild refilled and the recent "Snapshot now" requests. None is
sortable: each lists what the services give, in their order (newest first)."""

from __future__ import annotations

from typing import Any

import django_tables2 as tables
from django.template.defaultfilters import date, filesizeformat
from django.utils.html import format_html

from dashboard.format import duration
from dashboard.templatetags.recovery import thousands
from rescaler.cluster.snapshot_records import RestoreTaskRecord, SnapshotOverview


def time_html(value: Any) -> str:
    """A moment as the pages print it, in the site's time zone, with its ISO form."""
    return format_html(
        '<time datetime="{}">{}</time>', date(value, "c"), date(value, "Y-m-d H:i:s")
    )


class ThousandsColumn(tables.Column):
    """A whole number with thousands separated by commas, "–" for nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("empty_values", ())
        super().__init__(*args, **kwargs)

    def render(self, value: Any) -> str:
        return thousands(value)


class ExecutorColumn(tables.Column):
    """Where a Spark task ran: its executor's id as code, "–" when it is not known."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("empty_values", ())
        kwargs.setdefault("verbose_name", "Executor")
        super().__init__(*args, **kwargs)

    def render(self, value: Any) -> str:
        return format_html("<code>{}</code>", value or "–")


class SnapshotTable(tables.Table):
    """A pipeline's snapshots, newest first: its id, epoch, when and how long, what it holds,
    what took it, and where."""

    snapshot_id = tables.Column(verbose_name="Snapshot", attrs={"td": {"class": "name"}})
    epoch = ThousandsColumn(verbose_name="Epoch")
    taken_at = tables.Column(verbose_name="Taken")
    age_s = tables.Column(verbose_name="Age", empty_values=())
    keys = ThousandsColumn(verbose_name="Keys")
    bytes = ThousandsColumn(
        verbose_name="Bytes",
        attrs={"td": {"title": lambda record: filesizeformat(record.bytes)}},
    )
    duration_s = tables.Column(verbose_name="Duration", empty_values=())
    trigger = tables.Column(verbose_name="Trigger")
    requested_by = tables.Column(verbose_name="Requested by", default="–")
    executors = tables.Column(verbose_name="Executors", empty_values=())

    class Meta:
        attrs = {"class": "components snapshots", "aria-labelledby": "snapshots-title"}
        row_attrs = {"data-snapshot": lambda record: record.snapshot_id}
        orderable = False
        empty_text = "No snapshot yet."

    def render_snapshot_id(self, value: str) -> str:
        return format_html("<code>{}</code>", value)

    def render_taken_at(self, value: Any) -> str:
        return time_html(value)

    def render_age_s(self, value: float) -> str:
        return f"{duration(value)} ago"

    def render_duration_s(self, value: float) -> str:
        return duration(value)

    def render_executors(self, value: tuple[str, ...]) -> str:
        return ", ".join(value) or "–"


class RestoreProgressTable(tables.Table):
    """A restore under way: each task's PU, where it runs, its keys restored of its keys."""

    parallel_unit = tables.Column(verbose_name="PU")
    executor = ExecutorColumn()
    host = tables.Column(verbose_name="Host", default="–")
    keys = ThousandsColumn(verbose_name="Keys")
    keys_total = ThousandsColumn(verbose_name="Of")
    done = tables.Column(verbose_name="Done", empty_values=())

    class Meta:
        attrs = {"class": "components restore-progress", "aria-label": "Restore tasks in progress"}
        orderable = False
        empty_text = "No restore task has started yet."

    def render_done(self, value: bool) -> str:
        return "yes" if value else "no"


class TaskRunTable(tables.Table):
    """The Spark tasks of a restore or a rebuild: where each ran and what it did. ``kind`` is
    the table's class (``restore-tasks``, ``rebuild-tasks``), ``label`` its accessible name."""

    parallel_unit = tables.Column(verbose_name="PU")
    executor = ExecutorColumn()
    host = tables.Column(verbose_name="Host", default="–")
    keys = ThousandsColumn(verbose_name="Keys")
    bytes = ThousandsColumn(verbose_name="Bytes")
    seconds = tables.Column(verbose_name="Seconds", empty_values=())

    class Meta:
        orderable = False
        empty_text = "No task ran."

    def __init__(
        self, data: tuple[RestoreTaskRecord, ...], *, kind: str, label: str, **kwargs: Any
    ) -> None:
        super().__init__(data, attrs={"class": f"components {kind}", "aria-label": label}, **kwargs)

    def render_seconds(self, value: float) -> str:
        return duration(value)


class LostStoreTable(tables.Table):
    """The stores a rebuild found lost: which, and what the store check found."""

    fragment = tables.Column(verbose_name="Fragment")
    parallel_unit = tables.Column(verbose_name="PU")
    status = tables.Column(verbose_name="Found")
    detail = tables.Column(verbose_name="Detail", default="")

    class Meta:
        attrs = {"class": "components lost-stores", "aria-label": "Lost stores"}
        orderable = False
        empty_text = "No store was lost."


REQUEST_BADGE = {"done": "completed", "failed": "failed"}  # else pending


class SnapshotRequestTable(tables.Table):
    """The recent "Snapshot now" requests, newest first, with their runner command's fate."""

    at = tables.Column(verbose_name="Requested")
    requested_by = tables.Column(verbose_name="By")
    reason = tables.Column(verbose_name="Reason", default="", attrs={"td": {"class": "reason"}})
    command = tables.Column(verbose_name="Command", default="–")
    status = tables.Column(verbose_name="Status", default="–")
    detail = tables.Column(verbose_name="Runner's answer", default="")

    class Meta:
        attrs = {"class": "components snapshot-requests", "aria-label": "Recent snapshot requests"}
        orderable = False
        empty_text = "No snapshot was asked for."

    def render_at(self, value: Any) -> str:
        return time_html(value)

    def render_status(self, value: str) -> str:
        return format_html(
            '<span class="badge status-{}">{}</span>', REQUEST_BADGE.get(value, "pending"), value
        )


def snapshot_tables(overview: SnapshotOverview) -> dict[str, tables.Table | None]:
    """The page's tables of one pipeline's overview; None for a part it does not have."""
    restore, rebuild = overview.last_restore, overview.last_rebuild
    restoring = overview.restoring
    return {
        "snapshots": SnapshotTable(
            overview.snapshots, empty_text=f"No snapshot of {overview.pipeline} yet."
        ),
        "restoring": RestoreProgressTable(restoring.tasks) if restoring else None,
        "restore_tasks": (
            TaskRunTable(restore.tasks, kind="restore-tasks", label="Restore tasks")
            if restore and restore.tasks
            else None
        ),
        "lost_stores": LostStoreTable(rebuild.lost) if rebuild else None,
        "rebuild_tasks": (
            TaskRunTable(rebuild.tasks, kind="rebuild-tasks", label="Rebuild tasks")
            if rebuild and rebuild.tasks
            else None
        ),
        "requests": SnapshotRequestTable(overview.requests),
    }
