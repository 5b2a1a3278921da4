"""What an epoch's PU tasks reported, checked and turned into the epoch's report."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from workers.control import EpochReport, PuLoad
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import EpochPlan
from workers.runner.errors import RunnerError

log = logging.getLogger("workers.runner")


@dataclass(frozen=True)
class EpochTimings:
    """Where one epoch's time went on the driver, inside Spark's ``foreachBatch`` (Spark's own
    share around it, offsets and commit logs, is in the query's progress ``durationMs``)."""

    plan_s: float  # the barrier: commands, operation phases, the recorded plan
    build_s: float  # the epoch's DataFrame, built and analysed (py4j calls into the JVM)
    spark_job_s: float  # the Spark job: scheduling, every PU task, the collected reports
    bookkeeping_s: float  # checking the reports, the rescale ledger
    report_s: float  # the epoch report to the control plane

    def __str__(self) -> str:  # formatted only when the log line is written
        parts = ("plan", "build", "spark_job", "bookkeeping", "report")
        return ", ".join(f"{p} {getattr(self, p + '_s') * 1000:.0f} ms" for p in parts)


def check_reports(pipeline: Pipeline, plan: EpochPlan, stats: list[dict[str, Any]]) -> None:
    """Every PU task of every fragment must have reported: a rescale action (seal, ingest,
    drop) happens inside the task, so an epoch with a silent task is not committed as done."""
    reported = {(s["fragment"], s["pu"]) for s in stats}
    for frag in pipeline.fragments:
        missing = [
            pu
            for pu in plan.placements[frag.name].parallel_units
            if (frag.name, pu) not in reported
        ]
        if missing:
            raise RunnerError(
                f"epoch {plan.epoch}: {frag.name} PU tasks {missing} did not report; "
                f"the epoch is re-run"
            )


def epoch_report(
    *,
    pipeline: Pipeline,
    plan: EpochPlan,
    stats: list[dict[str, Any]],
    malformed: list[str],
    started: float,
    source_offset: dict[str, Any],
    records_per_vnode: dict[str, dict[int, float]],
    source_backlog: int | None = None,
) -> EpochReport:
    """The report of a committed epoch, from its PU tasks' stat rows (``started``: when the
    epoch's batch began, a ``time.perf_counter()`` reading)."""
    first = pipeline.fragments[0].name
    return EpochReport(
        pipeline=pipeline.name,
        epoch=plan.epoch,
        rows=sum(s["source_rows"] for s in stats if s["fragment"] == first) + len(malformed),
        malformed=len(malformed),
        duration_s=round(time.perf_counter() - started, 4),
        committed_at=time.time(),
        source_offset=source_offset,
        source_backlog=source_backlog,
        per_pu=[
            PuLoad(
                s["fragment"],
                s["pu"],
                s["records"],
                s["keys"],
                s["bytes"],
                executor=s.get("executor", ""),
                host=s.get("host", ""),
                busy_s=s.get("seconds"),
            )
            for s in stats
        ],
        per_vnode={
            frag.name: {
                int(v): (kb[0], kb[1])
                for s in stats
                if s["fragment"] == frag.name
                for v, kb in s["vnodes"].items()
            }
            for frag in pipeline.fragments
        },
        mapping_versions={n: p.version for n, p in plan.placements.items()},
        malformed_samples=malformed[:5],
        records_per_vnode=records_per_vnode,
    )


def log_committed(report: EpochReport, timings: EpochTimings, malformed: list[str]) -> None:
    """The runner's log line of a committed epoch (and a warning of its malformed records)."""
    if malformed:
        log.warning(
            "epoch %d: %d malformed records, e.g. %s", report.epoch, len(malformed), malformed[0]
        )
    log.info(
        "epoch %d committed: %d rows in %.3fs (%s)%s",
        report.epoch,
        report.rows,
        report.duration_s,
        timings,
        "" if report.rows else " (empty: a barrier for waiting control work)",
    )
