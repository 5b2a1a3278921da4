"""Forced barriers on an idle stream (workers/idle.py) and the tick in the sources' offsets."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.idle import BarrierTicks, awaits_barrier
from workers.rescale.operation import OperationState, StepState
from workers.rescale.protocol import FragmentBegin, StepPhase, StepSpec, Strategy
from workers.sources.control import ControlStream, restored_offsets
from workers.sources.control_legacy import ControlStreamReader, read_ticks
from workers.sources.spark import GeneratorStreamReader, JsonlStreamReader


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def op_with(*phases: str, **fields: object) -> OperationState:
    op = OperationState(
        operation_id="op",
        strategy=Strategy.LIVE,
        fragments={"f": FragmentBegin((), (), (), ())},
        begun_epoch=3,
    )
    for i, phase in enumerate(phases):
        step = StepState(StepSpec(i, "f", 0, 1, (i,), 1, 1))
        step.enter(StepPhase(phase))
        op.steps[i] = step
    for name, value in fields.items():
        setattr(op, name, value)
    return op


def never() -> bool:
    return False


def test_waiting_operations_tick_at_once_between_epochs(tmp_path: Path) -> None:
    clock = Clock()
    ticks = BarrierTicks(ControlStream(tmp_path), 0.5, clock=clock)
    assert not ticks.poll(True, lambda: True, never), "an epoch is running: it is a barrier"
    assert ticks.poll(False, lambda: True, never) and ticks.control.ticks() == 1
    clock.now += 0.2
    assert not ticks.poll(False, lambda: True, never), "Spark has not taken the tick yet"
    clock.now += 0.4
    assert ticks.poll(False, lambda: True, never), "not taken after idle_s: tick again"
    ticks.epoch_started()
    ticks.epoch_ended()
    assert ticks.poll(False, lambda: True, never) and ticks.control.ticks() == 3
    assert ticks.forced == 3


def test_commands_are_asked_for_only_after_idle_s_without_an_epoch(tmp_path: Path) -> None:
    clock = Clock()
    ticks = BarrierTicks(ControlStream(tmp_path), 0.5, clock=clock)
    asked: list[float] = []

    def commands() -> bool:
        asked.append(clock.now)
        return True

    assert not ticks.poll(False, never, commands) and not asked
    clock.now += 0.6
    ticks.epoch_ended()
    clock.now += 0.3
    assert not ticks.poll(False, never, commands) and not asked, "an epoch ended 0.3 s ago"
    clock.now += 0.3
    assert ticks.poll(False, never, commands) and asked == [clock.now]
    ticks.epoch_started()
    ticks.epoch_ended()
    clock.now += 0.6
    assert ticks.poll(False, never, lambda: False) is False
    clock.now += 0.1
    assert not ticks.poll(False, never, commands), "asked at most once per idle_s"
    assert len(asked) == 1 and ticks.control.ticks() == 1


def test_no_tick_without_waiting_work_and_none_when_the_control_plane_fails(
    tmp_path: Path,
) -> None:
    clock = Clock()
    ticks = BarrierTicks(ControlStream(tmp_path), 0.5, clock=clock)
    clock.now += 1
    assert not ticks.poll(False, never, never)

    def unreachable() -> bool:
        raise ConnectionError("database down")

    clock.now += 1
    assert not ticks.poll(False, never, unreachable)
    assert ticks.control.ticks() == 0 and not ticks.control.path.exists()


def test_a_tick_that_cannot_be_written_is_tried_again_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full STATE_DIR (ENOSPC) made the tick's write raise out of the runner's watch loop and
    killed the runner while it was waiting the disk out (the soak, issue 24)."""
    clock = Clock()
    ticks = BarrierTicks(ControlStream(tmp_path), 0.5, clock=clock)
    real_touch = Path.touch

    def full_disk(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "touch", full_disk)
    assert not ticks.poll(False, lambda: True, never), "not written: no tick"
    assert ticks.control.ticks() == 0 and ticks.forced == 0
    monkeypatch.setattr(Path, "touch", real_touch)
    assert ticks.poll(False, lambda: True, never), "space again: the next poll ticks at once"
    assert ticks.control.ticks() == 1


def test_read_ticks_tolerates_a_missing_or_garbled_file(tmp_path: Path) -> None:
    assert read_ticks(None) == 0 and read_ticks(tmp_path / "none") == 0
    (tmp_path / "bad").write_text("x")
    assert read_ticks(tmp_path / "bad") == 0


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (op_with(begun_epoch=None), True),  # begins at the next barrier
        (op_with("pending"), True),
        (op_with("collecting"), False),  # waits for its export thread, not for a barrier
        (op_with("collecting", "exported"), True),
        (op_with("acquiring"), True),
        (op_with("acquired"), True),
        (op_with("dropping"), True),
        (op_with("done"), False),  # the orchestrator's next step is a command: polled apart
        (op_with("done", finish_requested=True), True),  # completes at the next barrier
        (op_with("done", "cancelled", cancel_requested=True), True),
        # cancelled: a barrier gives the held step back to its source, export or not
        (op_with("collecting", cancel_requested=True), True),
        (op_with("done", status="completed", finish_requested=True), False),
        (OperationState(operation_id="s", strategy=Strategy.STOP_START, fragments={}), True),
    ],
)
def test_awaits_barrier(op: OperationState, expected: bool) -> None:
    assert awaits_barrier([op]) is expected


def test_a_tick_is_one_new_empty_file_for_spark_s_file_source(tmp_path: Path) -> None:
    stream = ControlStream(tmp_path)
    assert stream.ticks() == 0
    assert BarrierTicks(stream, 0.5).tick() == 1
    assert BarrierTicks(stream, 0.5).tick() == 2
    files = sorted(p.name for p in stream.path.iterdir())
    assert len(files) == 2 and all(f.startswith("tick-") for f in files)
    assert all((stream.path / f).stat().st_size == 0 for f in files), "no line, so no record"


def test_tick_files_are_never_named_alike_even_in_a_new_directory(tmp_path: Path) -> None:
    """Spark's file source remembers each path it listed (its log survives a restore that
    starts a new directory with no tick file): a name reused would never start an epoch."""
    first = ControlStream(tmp_path / "a")
    first.tick()
    again = ControlStream(tmp_path / "b")  # a restore: no tick file yet
    again.tick()
    names = {p.name for s in (first, again) for p in s.path.iterdir()}
    assert len(names) == 2


def test_a_restore_starts_the_file_stream_s_offset_again_and_keeps_the_counter() -> None:
    entry = 'v1\n{"batchWatermarkMs":0}\n{"offset":90}\n{"logOffset":7}'
    assert restored_offsets(entry) == 'v1\n{"batchWatermarkMs":0}\n{"offset":90}\n{"logOffset":-1}'
    counted = 'v1\n{"batchWatermarkMs":0}\n{"offset":90}\n{"tick":4}'
    assert restored_offsets(counted) == counted, "the Python source's counter travels along"


def test_a_checkpoint_of_the_python_control_source_keeps_that_source(tmp_path: Path) -> None:
    """Spark's file source cannot read the offsets the Python source logged ({"tick": N})."""
    assert not ControlStream.of(tmp_path).legacy, "a fresh state directory: the file stream"
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"offset":30}\n{"logOffset":2}')
    (offsets / "12").write_text('v1\n{"batchWatermarkMs":0}\n{"offset":90}\n{"tick":4}')
    (offsets / "9").write_text("garbage")
    old = ControlStream.of(tmp_path)
    assert old.legacy and old.path == tmp_path / "barrier-ticks", "the newest entry decides"
    assert BarrierTicks(old, 0.5).tick() == 1 and read_ticks(old.path) == 1
    (offsets / "13").write_text('v1\n{"batchWatermarkMs":0}\n{"offset":95}\n{"logOffset":0}')
    assert not ControlStream.of(tmp_path).legacy


def test_the_python_control_source_makes_its_offset_new_but_never_yields_a_record(
    tmp_path: Path,
) -> None:
    stream = ControlStream(tmp_path, legacy=True)
    path = stream.path
    control = ControlStreamReader({"barrier_ticks": str(path)})
    start = control.initialOffset()
    assert start == {"tick": 0}
    assert control.latestOffset(start, None) == start, "no tick: no new offset, so no epoch"
    BarrierTicks(stream, 0.5).tick()
    forced = control.latestOffset(start, None)
    assert forced == {"tick": 1}, "a tick makes the control stream's offset new"
    assert control.partitions(start, forced) == [], "and selects no record"
    path.write_text("garbage")
    assert control.latestOffset(forced, None) == forced, "never moves back"


def test_the_built_in_sources_know_nothing_of_ticks(tmp_path: Path) -> None:
    """Forced barriers are the control stream's job: the sources' offsets are records only."""
    generator = GeneratorStreamReader({"kind": "lines", "rows_per_epoch": "10", "max_rows": "20"})
    start = generator.initialOffset()
    assert generator.latestOffset(start, None) == {"offset": 10}
    assert generator.latestOffset({"offset": 20}, None) == {"offset": 20}
    # an offset logged by an earlier version (with its tick) still reads its range
    assert generator.latestOffset({"offset": 20, "tick": 3}, None) == {"offset": 20}
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    jsonl = JsonlStreamReader(
        {"kind": "events", "path": str(inbox), "manifest": str(tmp_path / "manifest")}
    )
    assert jsonl.latestOffset({"files": 0, "tick": 1}, None) == {"files": 0}


# -- Spark's no-data batches for processors -----------------------------------------------------
def test_an_event_time_processor_gets_one_no_data_epoch_per_advance_of_the_watermark() -> None:
    from workers.idle import NoDataEpochs

    advanced = [True]
    rule = NoDataEpochs(["eventtime"], lambda: advanced[0], 0.5)
    assert rule.due(0.0), "the watermark moved past the last epoch's: Spark runs a batch"
    advanced[0] = False  # that epoch ran at the new watermark, and nothing new came
    assert not rule.due(3600.0), "an idle stream then runs no more epochs"


def test_processing_time_timers_get_a_no_data_epoch_once_due_and_no_sooner() -> None:
    from workers.idle import NoDataEpochs

    now = [10_000]
    rule = NoDataEpochs(["none", "processingtime"], lambda: True, 0.5, now_ms=lambda: now[0])
    assert rule.due(1.0), "a restarted runner does not know its timers: one epoch finds out"
    rule.epoch_committed([{"next_timer_ms": 12_000}, {"next_timer_ms": None}, {}])
    assert not rule.due(60.0), "the earliest timer is not due"
    now[0] = 12_000
    assert not rule.due(0.1), "at most one no-data epoch per interval: an idle query never spins"
    assert rule.due(0.5)
    rule.epoch_committed([{"next_timer_ms": None}])
    assert not rule.due(60.0), "no timer left"


def test_no_processor_no_no_data_epochs() -> None:
    from workers.idle import NoDataEpochs

    rule = NoDataEpochs(["none"], lambda: True, 0.5)
    rule.epoch_committed([{"next_timer_ms": 0}])
    assert not rule.due(60.0)
