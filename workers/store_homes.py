"""Where each PU's store is: the executor, host and directory its last epoch task reported.

The runner keeps this record in the pipeline's directory (``store_homes.json``), rewritten only
when a store's home changes. The stores themselves stay on their executors
(:mod:`workers.layout`); the record is what lets a reader on the same host (``export-state``,
the key finder, the tests' oracles) find one, and what says where one is when it is elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.layout import store_path
from workers.pipeline.placement import write_json_atomic

FILE = "store_homes.json"


@dataclass(frozen=True)
class StoreHome:
    """One PU's store of one fragment: the executor and host it is on, and the executor's
    directory of the pipeline (:func:`workers.layout.local_root`) as that executor names it."""

    executor: str
    host: str
    root: str

    def path(self, fragment: str, pu: int) -> Path:
        return store_path(Path(self.root), fragment, pu)


class StoreHomes:
    """The record of a pipeline's store homes, by fragment and PU."""

    def __init__(self, pipeline_dir: Path) -> None:
        self.file = Path(pipeline_dir) / FILE
        self._homes: dict[tuple[str, int], StoreHome] | None = None

    def load(self) -> dict[tuple[str, int], StoreHome]:
        if self._homes is None:
            self._homes = {}
            if self.file.exists():
                data = json.loads(self.file.read_text("utf-8"))
                for fragment, pus in data.items():
                    for pu, home in pus.items():
                        self._homes[(fragment, int(pu))] = StoreHome(**home)
        return self._homes

    def update(self, stats: Iterable[dict[str, Any]]) -> bool:
        """Take the homes the epoch's ``stat`` rows report; saved (and True) if one changed."""
        homes = dict(self.load())
        for row in stats:
            if "store_root" not in row:
                continue
            homes[(row["fragment"], int(row["pu"]))] = StoreHome(
                str(row.get("executor", "")), str(row.get("host", "")), str(row["store_root"])
            )
        if homes == self._homes:
            return False
        data: dict[str, dict[str, dict[str, str]]] = {}
        for (fragment, pu), home in sorted(homes.items()):
            data.setdefault(fragment, {})[str(pu)] = home.__dict__.copy()
        write_json_atomic(self.file, data)
        self._homes = homes
        return True

    def of_fragment(self, fragment: str) -> dict[int, StoreHome]:
        return {pu: home for (frag, pu), home in sorted(self.load().items()) if frag == fragment}
