"""The boundary between the data plane and whatever controls it.

The runner calls a :class:`ControlInterface` at every epoch boundary: it reads pending commands,
acknowledges them, and reports the epoch, its heartbeat and (during a rescale) progress. The
control plane implements it with the Django ORM (``rescaler.runner.control.OrmControl``);
:class:`LocalControl` implements it with JSON files under the state directory so the data plane
runs on its own (``python -m workers run``) and in tests without Django.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workers.rescale.protocol import OperationProgress, ProgressAck, ReportFit

log = logging.getLogger(__name__)
T = TypeVar("T")


class ControlUnavailable(Exception):
    """The control plane cannot be reached right now (its database is restarting, the network is
    down): the call may succeed if made again later. Any other exception is a real failure."""


@dataclass(frozen=True)
class Command:
    """An instruction for the runner, executed at the next epoch boundary."""

    id: int
    kind: str  # a protocol.CommandKind
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PuLoad:
    fragment: str
    pu: int
    rows: int
    keys: int
    bytes: int
    # where the PU's task for this fragment really ran this epoch (Spark's executor id, "driver"
    # in local mode, and that executor's host): the truthful placement
    executor: str = ""
    host: str = ""
    # seconds the PU's task was busy with this fragment's epoch (its stat's "seconds"): the
    # autoscaler's true processing rate is rows per busy second; None: an older runner's report
    busy_s: float | None = None


class WorkerStatus(enum.StrEnum):
    """A worker's life in the control plane (docs/elastic-workers.md).

    The runner only sees whether a worker's executor is registered with Spark; the operator's
    intent (cordon, drain) and its consequences are the control plane's.
    """

    ACTIVE = "active"  # its PUs may be given vnodes
    CORDONED = "cordoned"  # removed soon: no new vnodes go to it; it keeps what it has
    DRAINING = "draining"  # a live rescale moves every fragment off its PUs
    DECOMMISSIONING = "decommissioning"  # drained; its executor is being stopped
    REMOVED = "removed"  # gone after a drain: its PUs left the cluster
    LOST = "lost"  # its executor disappeared without a drain: its PUs are lost


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the runner sees it: a Spark executor (local mode: the driver's JVM) and the
    parallel units the runner gave it."""

    name: str  # "local" in local mode, else "executor-<id>"
    executor_id: str  # Spark's executor id ("driver" in local mode)
    host: str
    cores: int
    parallel_units: tuple[int, ...]
    alive: bool  # registered with Spark now
    # the first epoch whose barrier saw this worker's PUs bootstrapped (stores created, the epoch
    # and the placement version known); -1 while it is not yet: no vnode may go to it before
    bootstrapped_epoch: int = -1
    # when Spark began decommissioning its executor (a preemption notice: SIGPWR to a standalone
    # worker, a Kubernetes eviction), unix seconds; None: no notice
    notice_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["parallel_units"] = list(self.parallel_units)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerInfo:
        return cls(**{**data, "parallel_units": tuple(data["parallel_units"])})


@dataclass(frozen=True)
class EpochReport:
    """What one committed epoch did."""

    pipeline: str
    epoch: int
    rows: int
    malformed: int
    duration_s: float
    committed_at: float  # unix time
    source_offset: dict[str, Any]
    per_pu: list[PuLoad]
    # fragment -> vnode -> (keys, bytes), for vnodes holding state
    per_vnode: dict[str, dict[int, tuple[int, int]]]
    mapping_versions: dict[str, int]
    malformed_samples: list[str] = field(default_factory=list)
    # fragment -> vnode -> records per epoch, smoothed (``workers.vnode_load``): the vnodes' load
    records_per_vnode: dict[str, dict[int, float]] = field(default_factory=dict)
    # records the source held past the epoch at its commit (SourceStreams.backlog); None: unknown
    source_backlog: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["per_vnode"] = {
            frag: {str(v): list(kb) for v, kb in vnodes.items()}
            for frag, vnodes in self.per_vnode.items()
        }
        data["records_per_vnode"] = {
            frag: {str(v): n for v, n in vnodes.items()}
            for frag, vnodes in self.records_per_vnode.items()
        }
        return data


@dataclass(frozen=True)
class Heartbeat:
    """What the runner says of itself every ``heartbeat_interval_s``, from its start on."""

    pipeline: str
    epoch: int  # the last committed epoch (-1: none yet)
    status: str  # "starting", "running", "stopping" or "stopped"
    spark: dict[
        str, Any
    ]  # its Spark application (workers.spark_session.spark_info); {} before it is up
    # its start, phase by phase (workers.start_phases.StartPhases.to_json)
    start: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    """What the runner registers when it starts: its workers, PUs, fragments and mappings."""

    pipeline: str
    workers: dict[str, list[int]]  # worker id -> its parallel unit ids
    # fragment name -> {"kind", "region", "vnodes", "parallel_units": [...], "mapping": [pu per vnode],
    #                   "version": int, "operator": str}
    fragments: dict[str, dict[str, Any]]
    spark: dict[str, Any]  # master, app id, ui url, version


class ControlInterface(Protocol):
    def register(self, topology: Topology) -> None:
        """Record (or refresh) the pipeline's workers, PUs, fragments and mappings."""

    def poll_commands(self, pipeline: str) -> list[Command]:
        """Commands not yet acknowledged, oldest first."""

    def ack_command(self, command_id: int, status: str, detail: str = "") -> None:
        """Mark a command done ("done") or refused ("failed") with a reason."""

    def ack_commands(self, acks: list[tuple[int, str, str]]) -> None:
        """``ack_command`` of each (command id, status, detail), all at once: a barrier acks
        every command it applied (hundreds of steps, in a large operation) in one write."""

    def report_epoch(self, report: EpochReport) -> None: ...

    def heartbeat(self, beat: Heartbeat) -> None:
        """The runner is alive, and says how it is."""

    def report_progress(self, pipeline: str, progress: dict[str, Any]) -> ProgressAck | None:
        """A rescale operation changed: ``progress`` (``OperationProgress.to_json``) is its
        figures with every step, or a delta carrying the steps changed since an acknowledged
        report. Answers which report the control plane holds now, and whether it wants a full
        one (a delta on a report it does not hold); None: nothing said (the next is full)."""

    def report_workers(self, pipeline: str, epoch: int, workers: list[WorkerInfo]) -> None:
        """The runner's whole view of its workers at the barrier of ``epoch``: sent when a
        worker joins, is bootstrapped or disappears. A worker missing from ``workers`` (or with
        ``alive`` false) has no executor any more."""

    def mapping_versions(self, pipeline: str) -> dict[str, int]:
        """The newest mapping version the control plane has recorded per fragment ({} when it
        knows none): a restore numbers its placement past them, so a version is never reused
        for another mapping."""


class PatientControl:
    """A :class:`ControlInterface` that waits out control-plane outages.

    A call that raises :class:`ControlUnavailable` is made again, with backoff, until it succeeds
    or ``patience_s`` has passed (then the error goes up: the runner stops with it). Every call is
    idempotent on the control plane's side (an epoch report replaces its row, a progress report
    is the operation's whole state, an ack sets a status), so repeating one whose answer was lost
    is safe. While it waits, the epoch waits: records stay in the source, nothing is committed
    that the control plane has not been told about. A heartbeat is not repeated: the next one
    replaces it.
    """

    def __init__(
        self,
        inner: ControlInterface,
        *,
        patience_s: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.patience_s = patience_s
        self._sleep = sleep
        self._clock = clock

    def _call(self, what: str, call: Callable[[], T]) -> T:
        deadline: float | None = None
        delay = 0.2
        while True:
            try:
                result = call()
            except ControlUnavailable as exc:
                now = self._clock()
                if deadline is None:
                    deadline = now + self.patience_s
                    log.warning("control plane unavailable (%s: %s); retrying", what, exc)
                if now >= deadline:
                    raise ControlUnavailable(
                        f"the control plane has been unreachable for {self.patience_s:.0f}s "
                        f"({what}: {exc}); check that its database is up and DATABASE_URL"
                    ) from exc
                self._sleep(min(delay, max(deadline - now, 0.0)))
                delay = min(delay * 2, 5.0)
                continue
            if deadline is not None:
                log.warning("control plane reachable again (%s)", what)
            return result

    def register(self, topology: Topology) -> None:
        self._call("register", lambda: self.inner.register(topology))

    def poll_commands(self, pipeline: str) -> list[Command]:
        return self._call("poll commands", lambda: self.inner.poll_commands(pipeline))

    def ack_command(self, command_id: int, status: str, detail: str = "") -> None:
        self._call("ack", lambda: self.inner.ack_command(command_id, status, detail))

    def ack_commands(self, acks: list[tuple[int, str, str]]) -> None:
        self._call("ack", lambda: self.inner.ack_commands(acks))

    def report_epoch(self, report: EpochReport) -> None:
        self._call(f"report epoch {report.epoch}", lambda: self.inner.report_epoch(report))

    def heartbeat(self, beat: Heartbeat) -> None:
        self.inner.heartbeat(beat)

    def report_progress(self, pipeline: str, progress: dict[str, Any]) -> ProgressAck | None:
        return self._call("report progress", lambda: self.inner.report_progress(pipeline, progress))

    def report_workers(self, pipeline: str, epoch: int, workers: list[WorkerInfo]) -> None:
        self._call("report workers", lambda: self.inner.report_workers(pipeline, epoch, workers))

    def mapping_versions(self, pipeline: str) -> dict[str, int]:
        return self._call("mapping versions", lambda: self.inner.mapping_versions(pipeline))


class LocalControl:
    """A file-backed control interface: ``<dir>/commands.jsonl`` in, ``<dir>/status.json`` out.

    Commands are appended as JSON lines ``{"id": 1, "kind": "stop", "payload": {}}``; acks go to
    ``acks.jsonl``; each epoch report replaces ``last_epoch.json`` and is appended to
    ``epochs.jsonl``. Good for scripts, tests and running without the control plane.
    """

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.topology: Topology | None = None

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with self._lock, open(self.dir / name, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")

    def _write_atomic(self, name: str, record: dict[str, Any]) -> None:
        tmp = self.dir / f"{name}.tmp"
        tmp.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.dir / name)

    def _read_lines(self, name: str) -> list[dict[str, Any]]:
        path = self.dir / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]

    def submit(self, kind: str, payload: dict[str, Any] | None = None) -> int:
        """Queue a command (used by scripts and tests); returns its id."""
        ids = [c["id"] for c in self._read_lines("commands.jsonl")]
        command_id = max(ids, default=0) + 1
        self._append("commands.jsonl", {"id": command_id, "kind": kind, "payload": payload or {}})
        return command_id

    def register(self, topology: Topology) -> None:
        self.topology = topology
        self._write_atomic("topology.json", asdict(topology))

    def poll_commands(self, pipeline: str) -> list[Command]:
        acked = {a["id"] for a in self._read_lines("acks.jsonl")}
        return [
            Command(id=c["id"], kind=c["kind"], payload=c.get("payload", {}))
            for c in self._read_lines("commands.jsonl")
            if c["id"] not in acked
        ]

    def ack_command(self, command_id: int, status: str, detail: str = "") -> None:
        self._append("acks.jsonl", {"id": command_id, "status": status, "detail": detail})

    def ack_commands(self, acks: list[tuple[int, str, str]]) -> None:
        for command_id, status, detail in acks:
            self.ack_command(command_id, status, detail)

    def acks(self) -> list[dict[str, Any]]:
        return self._read_lines("acks.jsonl")

    def report_epoch(self, report: EpochReport) -> None:
        data = report.to_json()
        self._write_atomic("last_epoch.json", data)
        summary = {k: v for k, v in data.items() if k not in ("per_vnode", "records_per_vnode")}
        self._append("epochs.jsonl", summary)

    def epochs(self) -> list[dict[str, Any]]:
        return self._read_lines("epochs.jsonl")

    def report_progress(self, pipeline: str, progress: dict[str, Any]) -> ProgressAck | None:
        """Keeps each operation's whole progress in ``progress/<operation_id>.json``, a delta
        merged into it (a delta on a report it does not hold is refused: ``full_wanted``), and
        appends every report as received to ``progress.jsonl``."""
        report = OperationProgress.from_json(progress)
        operation_id = report.operation_id
        self._append("progress.jsonl", {"at": time.time(), **progress})
        with self._lock:
            held = self.progress(operation_id) or {}
            session, version = held.get("session", ""), held.get("version", 0)
            fit = report.fit(session, version)
            if fit == ReportFit.GAP:
                return ProgressAck(operation_id, session, version, full_wanted=True)
            if fit == ReportFit.STALE:
                return ProgressAck(operation_id, session, version)
            merged = dict(progress)
            if report.delta:
                steps = {s["step"]: s for s in held.get("steps", ())}
                steps.update((s["step"], s) for s in progress.get("steps", ()))
                merged["steps"] = [steps[n] for n in sorted(steps)]
            merged["base_version"] = None  # what the file holds is whole
            (self.dir / "progress").mkdir(exist_ok=True)
            self._write_atomic(f"progress/{operation_id}.json", merged)
        return ProgressAck(operation_id, report.session, report.version)

    def report_workers(self, pipeline: str, epoch: int, workers: list[WorkerInfo]) -> None:
        record = {"epoch": epoch, "workers": [w.to_json() for w in workers]}
        self._write_atomic("workers.json", record)
        self._append("workers.jsonl", {"at": time.time(), **record})

    def mapping_versions(self, pipeline: str) -> dict[str, int]:
        """The file-backed control keeps its record inside the state directory: after a restore
        into an empty one there is nothing to number past."""
        if self.topology is None:
            return {}
        return {
            name: int(info["version"])
            for name, info in self.topology.fragments.items()
            if "version" in info
        }

    def workers(self) -> list[WorkerInfo]:
        path = self.dir / "workers.json"
        if not path.exists():
            return []
        data = json.loads(path.read_text("utf-8"))
        return [WorkerInfo.from_json(w) for w in data["workers"]]

    def progress(self, operation_id: str) -> dict[str, Any] | None:
        path = self.dir / "progress" / f"{operation_id}.json"
        return json.loads(path.read_text("utf-8")) if path.exists() else None

    def command_status(self, command_id: int) -> tuple[str, str] | None:
        for ack in reversed(self.acks()):
            if ack["id"] == command_id:
                return ack["status"], ack.get("detail", "")
        return None

    def heartbeat(self, beat: Heartbeat) -> None:
        self._write_atomic("heartbeat.json", {**asdict(beat), "at": time.time()})
