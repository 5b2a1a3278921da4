"""Lock order between a rescale request and an epoch report, on the real Postgres.

A rescale request locks its fragments' rows, then inserts rows that reference the pipeline
(the operation), whose foreign-key check at commit takes a KEY SHARE lock on the pipeline's row.
An epoch report locks the pipeline's row, then updates the fragments' rows (their vnode load).
Seen in a browser test (POST /rescale/ answered 503, "deadlock detected") when the two met: with
the report holding the pipeline FOR UPDATE, each waited for the other. The report takes FOR NO
KEY UPDATE, which a foreign-key check does not wait for."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from rescaler.cluster.models import EpochMetric, Fragment, Pipeline
from rescaler.cluster.services import epoch_record
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, register_cluster
from workers.control import EpochReport, PuLoad

pytestmark = pytest.mark.django_db(transaction=True)


def _report(epoch: int) -> EpochReport:
    return EpochReport(
        pipeline=PIPELINE,
        epoch=epoch,
        rows=10,
        malformed=0,
        duration_s=0.2,
        committed_at=time.time(),
        source_offset={"offset": epoch},
        per_pu=[PuLoad(FRAGMENT, pu, rows=5, keys=1, bytes=1) for pu in (0, 1)],
        per_vnode={FRAGMENT: {v: (1, 10) for v in range(16)}},
        mapping_versions={FRAGMENT: 1},
    )


def _waiting_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def test_an_epoch_report_and_a_rescale_request_do_not_deadlock() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks are Postgres's")
    register_cluster(epochs=1)
    pipeline = Pipeline.objects.get(name=PIPELINE)
    report_pid: list[int] = []
    failures: list[BaseException] = []

    def report() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                report_pid.append(cursor.fetchone()[0])
            epoch_record(report=_report(2))
        except BaseException as exc:  # the test reports it
            failures.append(exc)
        finally:
            connections.close_all()

    reporter = threading.Thread(target=report)
    with transaction.atomic():
        # the request: its fragments' rows locked first
        # (as rescaler.operations.requests does: by pk, no join, so only the fragments' rows)
        list(
            Fragment.objects.select_for_update()
            .filter(pipeline=pipeline)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        reporter.start()
        deadline = time.monotonic() + 30
        # the report holds the pipeline's row and waits for the fragments' rows
        while not (report_pid and _waiting_for_a_lock(report_pid[0])):
            assert time.monotonic() < deadline, "the report never waited for the fragments"
            assert reporter.is_alive(), f"the report did not wait: {failures}"
            time.sleep(0.02)
        # then a row that references the pipeline: its foreign-key check runs at commit
        metric: Any = EpochMetric.objects.create(
            pipeline=pipeline, epoch=99, rows=1, duration_s=0.1, committed_at=timezone.now()
        )
    reporter.join(timeout=30)
    assert not failures, f"the epoch report failed: {failures[0]!r}"
    assert EpochMetric.objects.filter(pk=metric.pk).exists()
    assert Pipeline.objects.get(pk=pipeline.pk).last_epoch == 2
