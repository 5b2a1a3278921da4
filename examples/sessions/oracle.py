"""An oracle for the example, written without Spark or Rescaler: the closed sessions and the
open state that ``SessionTracker`` must give for the generator's clicks cut into epochs.

It follows Spark's micro-batch rules directly: the watermark of epoch e is the largest event
time of epochs before e minus the delay (never going back, 0 at first); a click at or below the
previous epoch's watermark is late and dropped; in each epoch, each user's clicks in source
order, then the timers due at the watermark.

    python -m examples.sessions.oracle --epochs 6 --rows-per-epoch 1000 --key-space 300
    python -m examples.sessions.oracle ... --compare state.jsonl   # export_state's output
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from examples.sessions.pipeline import DELAY_MS, GAP_S, PATH


@dataclass
class Open:
    start: int
    last: int
    clicks: int = 0
    nbytes: int = 0
    path: list[str] = field(default_factory=list)
    views: Counter[str] = field(default_factory=Counter)

    def closed(self, user: str) -> tuple[Any, ...]:
        top = sorted((-n, page) for page, n in self.views.items())[0][1]
        path = ">".join(self.path)
        return (user, self.start, self.last, self.clicks, self.nbytes, len(self.views), top, path)


def expected(
    epochs: list[list[tuple[str, str, int, int]]],
) -> tuple[Counter[tuple[Any, ...]], dict[str, Open]]:
    """``epochs``: each epoch's clicks (user, page, ts seconds, bytes) in source order."""
    closed: Counter[tuple[Any, ...]] = Counter()
    sessions: dict[str, Open] = {}
    timers: dict[str, int] = {}
    watermark = previous = 0
    for clicks in epochs:
        by_user: dict[str, list[tuple[str, int, int]]] = {}
        for user, page, ts, nbytes in clicks:
            if ts * 1000 > previous:  # late clicks are dropped
                by_user.setdefault(user, []).append((page, ts, nbytes))
        for user, rows in by_user.items():
            for page, ts, nbytes in rows:
                s = sessions.get(user)
                if s is not None and ts - s.last > GAP_S:
                    closed[s.closed(user)] += 1
                    s = None
                if s is None:
                    s = sessions[user] = Open(ts, ts)
                s.last, s.clicks, s.nbytes = max(s.last, ts), s.clicks + 1, s.nbytes + nbytes
                s.path = [*s.path[-(PATH - 1) :], page]
                s.views[page] += 1
            timers[user] = (sessions[user].last + GAP_S) * 1000
        for user, expiry in sorted(timers.items(), key=lambda kv: (kv[1], kv[0])):
            if expiry <= watermark:
                closed[sessions.pop(user).closed(user)] += 1
                del timers[user]
        newest = max((ts * 1000 for _, _, ts, _ in clicks), default=None)
        previous = watermark
        if newest is not None:
            watermark = max(watermark, newest - DELAY_MS)
    return closed, sessions


def generated(
    epochs: int, rows_per_epoch: int, key_space: int
) -> list[list[tuple[str, str, int, int]]]:
    """The project's generator's clicks (the runner's defaults), cut into epochs."""
    from workers.sources.generator import GeneratorConfig, generate

    config = GeneratorConfig(kind="events", key_space=key_space)
    out = []
    for e in range(epochs):
        rows: list[tuple[str, str, int, int]] = []
        for batch in generate(config, e * rows_per_epoch, (e + 1) * rows_per_epoch):
            cols = batch.to_pydict()
            rows += zip(cols["user"], cols["page"], cols["ts"], cols["bytes"], strict=True)
        out.append(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--rows-per-epoch", type=int, default=10_000)
    parser.add_argument("--key-space", type=int, default=100_000)
    parser.add_argument("--compare", help="export_state's JSON lines of the sessions fragment")
    args = parser.parse_args(argv)
    closed, sessions = expected(generated(args.epochs, args.rows_per_epoch, args.key_space))
    print(f"{sum(closed.values())} sessions closed, {len(sessions)} open", file=sys.stderr)
    if not args.compare:
        for user, s in sorted(sessions.items()):
            print(json.dumps({"user": user, "start": s.start, "last": s.last, "clicks": s.clicks}))
        return 0
    found = {}
    with open(args.compare, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            value = row["value"]["state"]
            if "session" in value:
                found[row["key"]] = value["session"]["value"]
    want = {u: [s.start, s.last, s.clicks, s.nbytes] for u, s in sessions.items()}
    wrong = sorted(u for u in want.keys() | found.keys() if want.get(u) != found.get(u))
    print(f"{len(want) - len(wrong)} of {len(want)} open sessions equal; differing: {wrong[:10]}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
