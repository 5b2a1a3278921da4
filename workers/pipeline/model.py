"""What a pipeline is: a source, keyed stateful fragments in keyed regions, and a sink."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.operators import KeyedOperator

DEFAULT_VNODES = 256


class PipelineError(Exception):
    """Base class of pipeline definition errors."""


class UnknownPipeline(PipelineError):
    """No built-in pipeline has that name."""


class UnknownFragment(PipelineError):
    """The pipeline has no fragment of that name."""


@dataclass(frozen=True)
class Fragment:
    """A keyed stateful operator stage: its own keyed region, vnodes and per-PU stores.

    ``upstream`` None means the fragment reads the source's records (after ``Pipeline.prepare``);
    otherwise it reads the outputs of the named fragment, re-keyed by their output key.
    """

    name: str
    operator: KeyedOperator
    key: str  # the input column holding this fragment's key
    region: int
    vnodes: int = DEFAULT_VNODES
    upstream: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.vnodes <= 1 << 16:
            raise PipelineError(f"{self.name}: vnodes must be in 1..65536, not {self.vnodes}")


@dataclass(frozen=True)
class Pipeline:
    """A source kind, a record preparation in Spark SQL, and stateful fragments in order."""

    name: str
    source_kind: str  # "lines" or "events": the shape of the source's records
    fragments: tuple[Fragment, ...]
    # source DataFrame (seq, fields..., _malformed) -> the first fragment's input: seq, its key
    # column, its operator's columns, ``_malformed`` (every malformed source row kept as exactly
    # one row) and ``src`` (1 on exactly one record per good source row: how rows are counted)
    prepare: Callable[[Any], Any]
    description: str = ""
    sink: str = "sink"
    extra: dict[str, Any] = field(default_factory=dict)

    def fragment(self, name: str) -> Fragment:
        for frag in self.fragments:
            if frag.name == name:
                return frag
        known = ", ".join(f.name for f in self.fragments)
        raise UnknownFragment(f"pipeline {self.name!r} has no fragment {name!r} (it has: {known})")

    def with_vnodes(self, vnodes: int) -> Pipeline:
        frags = tuple(
            Fragment(f.name, f.operator, f.key, f.region, vnodes, f.upstream)
            for f in self.fragments
        )
        return Pipeline(
            self.name, self.source_kind, frags, self.prepare, self.description, self.sink
        )

    def topology_fragments(self) -> list[dict[str, Any]]:
        """Source, stateful fragments and sink, in dataflow order, for the fragment matrix."""
        rows: list[dict[str, Any]] = [{"name": "source", "kind": "source", "region": 0}]
        for frag in self.fragments:
            rows.append(
                {
                    "name": frag.name,
                    "kind": "stateful",
                    "region": frag.region,
                    "vnodes": frag.vnodes,
                    "key": frag.key,
                    "operator": frag.operator.describe(),
                    "upstream": frag.upstream or "source",
                }
            )
        rows.append({"name": self.sink, "kind": "sink", "region": self.fragments[-1].region})
        return rows
