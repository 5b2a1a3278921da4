"""What the runner registers with the control plane: its workers, PUs, fragments and mappings."""

from __future__ import annotations

from typing import Any

from workers.control import Topology
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import VnodeMapping
from workers.spark_session import spark_info


def runner_topology(
    *,
    pipeline: Pipeline,
    placements: dict[str, VnodeMapping],
    workers: dict[str, list[int]],
    source: str,
    sink: str,
    spark: Any,
) -> Topology:
    """The topology of a running pipeline: each fragment's row, its operator's description
    (the source's and the sink's for theirs), its PUs and mapping (a fragment with no placement
    of its own, the source, runs on every PU)."""
    fragments: dict[str, dict[str, Any]] = {}
    described = {"source": source, "sink": sink}
    for row in pipeline.topology_fragments():
        entry = dict(row)
        if row["kind"] in described:
            entry["operator"] = described[row["kind"]]
        placement = placements.get(row["name"])
        if placement is not None:
            entry.update(
                parallel_units=list(placement.parallel_units),
                mapping=list(placement.mapping),
                version=placement.version,
            )
        else:
            entry["parallel_units"] = sorted(
                {pu for p in placements.values() for pu in p.parallel_units}
            )
        fragments[row["name"]] = entry
    return Topology(
        pipeline=pipeline.name,
        workers=workers,
        fragments=fragments,
        spark=spark_info(spark) if spark is not None else {},
    )
