"""Rescaling a runner that uses the file-based control (``python -m workers rescale ...``)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from workers.control import LocalControl
from workers.pipeline.placement import PlacementStore
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.planner import plan_request
from workers.rescale.protocol import CommandKind, OperationRequest, OperationStatus, Plan, Tick
from workers.rescale.request import ClusterView, FragmentView, validate

HEARTBEAT_STALE_S = 30.0


class LocalChannel:
    """OperationChannel over a runner's control directory."""

    def __init__(self, control: LocalControl) -> None:
        self.control = control

    def submit(self, kind: CommandKind, payload: dict[str, Any]) -> int:
        return self.control.submit(kind, payload)

    def progress(self, operation_id: str) -> dict[str, Any] | None:
        return self.control.progress(operation_id)

    def command_status(self, command_id: int) -> tuple[str, str] | None:
        return self.control.command_status(command_id)


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8")) if path.exists() else {}


def cluster_view(pipeline_dir: Path) -> ClusterView:
    """The cluster as the runner last registered and reported it."""
    control_dir = Path(pipeline_dir) / "control"
    topology = _read(control_dir / "topology.json")
    if not topology:
        raise FileNotFoundError(
            f"no runner has registered in {pipeline_dir}: start it first "
            f"(python -m workers run --pipeline ...)"
        )
    beat = _read(control_dir / "heartbeat.json")
    alive = beat.get("status") == "running" and time.time() - beat.get("at", 0) < HEARTBEAT_STALE_S
    placements = PlacementStore(pipeline_dir).load() or {}
    last = _read(control_dir / "last_epoch.json")
    busy: dict[str, str] = {}
    for path in (control_dir / "progress").glob("*.json"):
        progress = _read(path)
        if progress.get("status") == OperationStatus.RUNNING:
            for name in progress.get("fragments", []):
                busy[name] = progress["operation_id"]
    fragments: dict[str, FragmentView] = {}
    for name, info in topology["fragments"].items():
        placement = placements.get(name)
        load = {int(v): (kb[0], kb[1]) for v, kb in last.get("per_vnode", {}).get(name, {}).items()}
        fragments[name] = FragmentView(
            name=name,
            stateful=placement is not None,
            parallel_units=placement.parallel_units
            if placement
            else tuple(info.get("parallel_units", [])),
            mapping=placement.mapping if placement else (),
            vnode_load=load,
            vnode_records={
                int(v): n for v, n in last.get("records_per_vnode", {}).get(name, {}).items()
            },
            busy_with=busy.get(name),
        )
    pu_worker = {pu: worker for worker, pus in topology["workers"].items() for pu in pus}
    worker_alive = {w: alive for w in topology["workers"]}
    # the runner's own view of its workers, once it reported one: a worker without an executor,
    # or whose PUs are not bootstrapped yet, may not be given vnodes
    for worker in LocalControl(control_dir).workers():
        worker_alive[worker.name] = alive and worker.alive and worker.bootstrapped_epoch >= 0
        pu_worker.update(dict.fromkeys(worker.parallel_units, worker.name))
    return ClusterView(pu_worker, worker_alive, fragments)


def plan_local(pipeline_dir: Path, request: OperationRequest) -> Plan:
    """Validate and plan against the runner's own view (raises RescaleError subclasses)."""
    cluster = cluster_view(pipeline_dir)
    validate(request, cluster)
    last = _read(Path(pipeline_dir) / "control" / "last_epoch.json")
    return plan_request(request, cluster, epoch_s=max(last.get("duration_s", 1.0), 0.05))


def rescale(
    pipeline_dir: Path,
    request: OperationRequest,
    *,
    operation_id: str | None = None,
    timeout_s: float = 3600.0,
    on_tick: Any = None,
) -> Tick:
    """Plan, then drive the operation to its end; returns the last progress."""
    plan = plan_local(pipeline_dir, request)
    control = LocalControl(Path(pipeline_dir) / "control")
    orchestrator = Orchestrator(LocalChannel(control), operation_id or uuid.uuid4().hex[:12], plan)
    return orchestrator.run(timeout_s=timeout_s, on_tick=on_tick)
