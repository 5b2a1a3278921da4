"""The runner's epoch loop without Spark, for model tests of the rescale protocol.

Everything but Spark is the product's own code: the runner's barrier (``workers.barrier``: commands,
the executor's plans and phases, the recorded epoch plan), exports, stop-start, the orchestrator,
the per-PU task (``run_task``) and the real stores. Each record goes to the slot that
``route_record`` gives it (``route_slots``' table of the Spark job, and a cut vnode's key
ranges); only the hashes and the shuffle are done here in Python instead of Spark SQL. The
simulation can crash between any two tasks of an epoch or restart the runner from disk.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from workers.barrier import Barrier, owned_vnodes, route_record, route_slots
from workers.control import Command, LocalControl
from workers.epoch import TaskSpec, run_task
from workers.hashing import vnode_of
from workers.layout import local_root, pu_store
from workers.operators import KeyedOperator, Record
from workers.pipeline.placement import EpochPlan, PlacementStore, VnodeMapping
from workers.rescale.executor import HoldQueueBounds, RescaleExecutor
from workers.state import open_store
from workers.state.base import decode_key

FRAGMENT = "chain"
MOD = (1 << 61) - 1


class SeqChain(KeyedOperator):
    """State [n, h] with h folding every record's seq in order: any lost, duplicated or
    reordered update of a key changes it (I2 and I3 in one number)."""

    name = "seq_chain"
    columns = ("seq",)
    output_fields = (("n", "int64"),)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list]:
        n, h = state or (0, 0)
        for (seq,) in records:
            n, h = n + 1, (h * 1_000_003 + seq + 1) % MOD
        return [n, h], [(key, n)]


def oracle(records: list[tuple[str, int]]) -> dict[str, list[int]]:
    state: dict[str, list[int]] = {}
    for key, seq in sorted(records, key=lambda r: r[1]):
        n, h = state.get(key, (0, 0))
        state[key] = [n + 1, (h * 1_000_003 + seq + 1) % MOD]
    return state


class Crash(Exception):
    """The simulated runner died."""


@dataclass
class EpochResult:
    epoch: int
    plan: EpochPlan
    stats: list[dict[str, Any]]


class SimRunner:
    def __init__(
        self,
        root: Path,
        *,
        vnodes: int,
        pu_count: int,
        initial: list[int],
        backend: str = "lmdb",
        hold_queue_bounds: HoldQueueBounds | None = None,
    ) -> None:
        self.root = root
        self.vnodes = vnodes
        self.backend = backend
        self.control = LocalControl(root / "control")
        self.placement_store = PlacementStore(root)
        placements = self.placement_store.load() or {
            FRAGMENT: VnodeMapping.initial(FRAGMENT, vnodes, initial)
        }
        self.placements = placements
        self.executor = RescaleExecutor(
            root,
            placements,
            backend=backend,
            worker_pus=set(range(pu_count)),
            report=lambda p: self.control.report_progress("sim", p),
            background_exports=False,
            hold_queue_bounds=hold_queue_bounds,
        )
        self.barrier = Barrier(
            "sim", self.control, self.executor, self.placements, self.placement_store
        )
        self.placement_store.save(self.placements)
        self.executor.placements_saved()
        self.operator = SeqChain()

    def run_epoch(
        self,
        epoch: int,
        records: list[tuple[str, int]],
        *,
        crash_after: int | None = None,
        rng: random.Random | None = None,
    ) -> EpochResult:
        """Run one epoch; with ``crash_after`` k, die after k of its tasks committed."""
        plan = self.barrier.plan(epoch)
        placement = plan.placements[FRAGMENT]
        actions = plan.fragment_actions(FRAGMENT)
        slots = route_slots(placement, actions)
        per_slot: dict[int, list[dict[str, Any]]] = {
            i: [] for i in range(len(placement.parallel_units))
        }
        for key, seq in records:
            vnode = vnode_of(key, self.vnodes)
            slot, held = route_record(placement, actions, slots, key, vnode)
            per_slot[slot].append(
                {
                    "kind": "held" if held else "rec",
                    "key": key,
                    "seq": seq,
                    "src": 1,
                    "info": None,
                    "vnode": vnode,
                    "slot": slot,
                }
            )
        spec = TaskSpec(
            fragment=FRAGMENT,
            operator=self.operator,
            epoch=epoch,
            parallel_units=placement.parallel_units,
            owned=owned_vnodes(placement, actions),
            state_root=str(self.root),
            backend=self.backend,
            terminal=True,
            actions=tuple(actions.slot(pu) for pu in placement.parallel_units),
        )
        order = list(per_slot)
        (rng or random).shuffle(order)  # tasks finish in any order
        stats: list[dict[str, Any]] = []
        schema = pa.schema(
            [
                ("kind", pa.string()),
                ("key", pa.string()),
                ("seq", pa.int64()),
                ("src", pa.int32()),
                ("info", pa.string()),
                ("vnode", pa.int64()),
                ("slot", pa.int32()),
            ]
        )
        import json

        for done, slot in enumerate(order):
            if crash_after is not None and done == crash_after:
                raise Crash(f"crash in epoch {epoch} after {done} tasks")
            batch = pa.RecordBatch.from_pylist(per_slot[slot], schema=schema)
            for out in run_task(spec, slot, iter([batch] if per_slot[slot] else [])):
                table = pa.Table.from_batches([out])
                for kind, info in zip(table["kind"].to_pylist(), table["info"].to_pylist()):
                    if kind == "stat":
                        stats.append(json.loads(info))
        self.executor.committed(epoch, stats)
        return EpochResult(epoch, plan, stats)

    # -- inspection ----------------------------------------------------------------------------
    def state_by_store(self) -> dict[int, dict[str, tuple[int, Any]]]:
        """PU -> key -> (vnode, value), for every store that exists."""
        out: dict[int, dict[str, tuple[int, Any]]] = {}
        base = local_root(self.root) / "stores" / FRAGMENT
        if not base.is_dir():
            return out
        for path in sorted(base.iterdir()):
            pu = int(path.name[3:])
            with open_store(
                self.backend, pu_store(self.root, FRAGMENT, pu), readonly=True
            ) as store:
                rows = {}
                for key, value in store.scan():
                    vnode, raw = decode_key(key)
                    rows[raw.decode()] = (vnode, self.operator.decode(value))
                out[pu] = rows
        return out

    def submit(self, kind: str, payload: dict[str, Any]) -> int:
        return self.control.submit(kind, payload)


def command(kind: str, **payload: Any) -> Command:
    return Command(0, kind, payload)
