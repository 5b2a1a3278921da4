"""Progress reports carry the steps that changed since the acknowledged report (issue 23,
"Control plane II"): a delta on a version, a full report after a restart, a lost report or a
gap, and the control's view ends equal to the runner's whatever is lost on the way."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from workers.control import LocalControl
from workers.rescale.protocol import (
    OperationProgress,
    OperationStatus,
    ProgressAck,
    ReportFit,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)
from workers.rescale.reports import ProgressReports

OP = "op1"


def head() -> OperationProgress:
    return OperationProgress(
        operation_id=OP,
        strategy=Strategy.LIVE,
        fragments=("chain",),
        status=OperationStatus.RUNNING,
        phase=StopStartPhase.BEGUN,
    )


def steps(count: int, phase: StepPhase = StepPhase.PENDING) -> dict[int, StepProgress]:
    return {
        n: StepProgress(
            step=n, fragment="chain", source_pu=0, target_pu=1, vnodes=(n,), phase=phase
        )
        for n in range(1, count + 1)
    }


class Runner:
    """The runner's side: its steps and its reports, sent to a ``LocalControl``, as the ledger
    sends them (a full report at once when the control asks for one)."""

    def __init__(self, control: LocalControl, count: int) -> None:
        self.control = control
        self.steps = steps(count)
        self.reports = ProgressReports()
        self.sent: list[OperationProgress] = []
        self.lose_next = False

    def send(self, *, full: bool = False) -> OperationProgress:
        report = self.reports.report(head(), self.steps, lambda s: s, full=full)
        self.sent.append(report)
        if self.lose_next:  # lost on the way: the control never saw it
            self.lose_next = False
            self.reports.answered(report, None)
            return report
        ack = self.control.report_progress("sim", report.to_json())
        if self.reports.answered(report, ack):
            self.send(full=True)
        return report

    def move(self, number: int, phase: StepPhase) -> None:
        self.steps[number] = replace(self.steps[number], phase=phase)


def view(control: LocalControl) -> dict[int, dict[str, Any]]:
    progress = control.progress(OP)
    assert progress is not None
    return {s["step"]: s for s in progress["steps"]}


def runner_view(runner: Runner) -> dict[int, dict[str, Any]]:
    return {n: s.to_json() for n, s in runner.steps.items()}


@pytest.fixture
def control(tmp_path: Path) -> LocalControl:
    return LocalControl(tmp_path / "control")


def test_the_first_report_is_full_and_one_changed_step_is_a_delta_of_one(
    control: LocalControl,
) -> None:
    runner = Runner(control, 100)
    first = runner.send()
    assert first.base_version is None and len(first.steps) == 100
    runner.move(7, StepPhase.COLLECTING)
    second = runner.send()
    assert second.base_version == first.version and second.version == first.version + 1
    assert [s.step for s in second.steps] == [7]
    assert view(control) == runner_view(runner)


def test_nothing_changed_reports_no_step(control: LocalControl) -> None:
    runner = Runner(control, 10)
    runner.send()
    assert runner.send().steps == ()


def test_an_ended_step_acknowledged_is_not_looked_at_again(control: LocalControl) -> None:
    runner = Runner(control, 3)
    runner.send()
    runner.move(1, StepPhase.DONE)
    assert [s.step for s in runner.send().steps] == [1]
    looked: list[int] = []

    def progress_of(step: StepProgress) -> StepProgress:
        looked.append(step.step)
        return step

    runner.reports.report(head(), runner.steps, progress_of)
    assert sorted(looked) == [2, 3]


def test_a_lost_report_makes_the_next_one_full_and_no_step_is_lost(
    control: LocalControl,
) -> None:
    runner = Runner(control, 20)
    runner.send()
    runner.move(3, StepPhase.COLLECTING)
    runner.lose_next = True
    runner.send()
    runner.move(4, StepPhase.COLLECTING)
    after = runner.send()
    assert after.base_version is None and len(after.steps) == 20
    assert view(control) == runner_view(runner)


def test_a_step_changed_and_changed_back_across_a_lost_answer_is_reported(
    control: LocalControl,
) -> None:
    """The control may hold a report whose answer was lost: a step that changed in it and
    came back to the acknowledged figures must still be sent."""
    runner = Runner(control, 5)
    runner.send()
    runner.steps[2] = replace(runner.steps[2], error="export failed")
    report = runner.reports.report(head(), runner.steps, lambda s: s)
    control.report_progress("sim", report.to_json())  # applied, the answer lost
    runner.reports.answered(report, None)
    runner.steps[2] = replace(runner.steps[2], error="")
    runner.send()
    assert view(control)[2]["error"] == ""
    assert view(control) == runner_view(runner)


def test_a_gap_is_refused_and_a_full_report_follows_with_the_same_final_state(
    control: LocalControl, tmp_path: Path
) -> None:
    runner = Runner(control, 30)
    runner.send()
    runner.move(1, StepPhase.COLLECTING)
    runner.send()
    # the control loses what it held (a restored database, another control plane)
    (tmp_path / "control" / "progress" / f"{OP}.json").unlink()
    runner.move(2, StepPhase.COLLECTING)
    delta = runner.reports.report(head(), runner.steps, lambda s: s)
    assert delta.delta
    ack = control.report_progress("sim", delta.to_json())
    assert ack is not None and ack.full_wanted
    assert control.progress(OP) is None, "a delta on a report not held changes nothing"
    assert runner.reports.answered(delta, ack), "the runner is asked for a full report"
    full = runner.send(full=True)
    assert full.base_version is None
    assert view(control) == runner_view(runner)


def test_a_restarted_runner_reports_in_full_and_its_deltas_build_on_that(
    control: LocalControl,
) -> None:
    runner = Runner(control, 10)
    runner.send()
    runner.move(5, StepPhase.COLLECTING)
    runner.send()
    restarted = Runner(control, 10)
    restarted.steps = dict(runner.steps)
    restarted.move(5, StepPhase.EXPORTED)
    first = restarted.send()
    assert first.base_version is None and first.session != runner.reports.session
    restarted.move(6, StepPhase.COLLECTING)
    assert [s.step for s in restarted.send().steps] == [6]
    assert view(control) == runner_view(restarted)
    # the old session's reports no longer apply
    stale = runner.reports.report(head(), runner.steps, lambda s: s)
    ack = control.report_progress("sim", stale.to_json())
    assert ack is not None and ack.full_wanted
    assert view(control) == runner_view(restarted)


def test_an_older_report_arriving_late_is_ignored(control: LocalControl) -> None:
    runner = Runner(control, 4)
    runner.send()
    runner.move(1, StepPhase.COLLECTING)
    older = runner.reports.report(head(), runner.steps, lambda s: s)
    runner.move(1, StepPhase.EXPORTED)
    newer = runner.reports.report(head(), runner.steps, lambda s: s)
    assert control.report_progress("sim", newer.to_json()) == ProgressAck(
        OP, newer.session, newer.version
    )
    ack = control.report_progress("sim", older.to_json())
    assert ack == ProgressAck(OP, newer.session, newer.version), "the newer one is held"
    assert view(control)[1]["phase"] == StepPhase.EXPORTED
    # answers in the other order: the later one's view stays
    assert not runner.reports.answered(newer, ProgressAck(OP, newer.session, newer.version))
    runner.reports.answered(older, ProgressAck(OP, older.session, older.version))
    assert runner.reports.acked_version(OP) == newer.version


@pytest.mark.parametrize(
    ("session", "version", "fit"),
    [
        ("", 0, ReportFit.APPLY),  # nothing held: a full report applies
        ("s", 4, ReportFit.APPLY),
        ("s", 5, ReportFit.STALE),
        ("other", 9, ReportFit.APPLY),  # a restarted runner's full report
    ],
)
def test_a_full_report_fits(session: str, version: int, fit: ReportFit) -> None:
    assert replace(head(), session="s", version=5).fit(session, version) == fit


@pytest.mark.parametrize(
    ("session", "version", "fit"),
    [
        ("s", 3, ReportFit.APPLY),  # holds its base
        ("s", 4, ReportFit.APPLY),  # holds a later report: what changed since includes it
        ("s", 2, ReportFit.GAP),  # a report between was not applied
        ("", 0, ReportFit.GAP),
        ("other", 3, ReportFit.GAP),
        ("s", 5, ReportFit.STALE),
    ],
)
def test_a_delta_fits(session: str, version: int, fit: ReportFit) -> None:
    delta = replace(head(), session="s", version=5, base_version=3)
    assert delta.fit(session, version) == fit


def test_a_report_of_an_older_runner_is_full() -> None:
    old = head().to_json()
    for name in ("session", "version", "base_version"):
        old.pop(name)
    report = OperationProgress.from_json(old)
    assert not report.delta and report.fit("s", 7) == ReportFit.APPLY
