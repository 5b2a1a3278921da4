"""Rescale time against state size, from ``bench/rescale.py`` results at several sizes.

Each input is one run of ``bench/rescale.py`` (its JSON) at one state size: 1.6M and 16M
counts, 1.6M states of 1 KB. Per strategy and size it reads the median total time, the bytes
and keys moved and the state's bytes, then fits the live all-at-once times as

    total_s = T0 + bytes_moved / rate

(least squares over every run of every size): T0 is the part that does not grow with the
state (barriers, epochs, the Spark job's fixed cost), ``rate`` the transfer's bytes per second.
The same fit over the transfer alone (the union of the steps' collecting->exported spans) says
how fast the exports themselves ran. The 16M / 1.6M ratio of the total time (same share moved,
half the vnodes) is the issue's "grows with the bytes moved, not with total state" check.

    .venv/bin/python bench/rescale_sizes.py bench/results/rescale_1600k.json \\
        bench/results/rescale_16m.json bench/results/rescale_16m_spark_native.json \\
        bench/results/rescale_1kb.json

A file may hold one strategy alone (Spark's route at 16M, run after the others): each file's
strategies are points of their own, and a point without a state size of its own (Spark's route
stores none the benchmark measures) takes the one of another file's run of the same keys.

Prints a table, writes ``bench/results/rescale_sizes.json`` and ``.png`` (``--out``). It runs
nothing: it only reads the results (their validity, load and exactness are carried over).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402
from bench.rescale import LABELS  # noqa: E402

LOG_PREFIX = "rescale-sizes"
FITTED = "all_at_once"


@dataclass(frozen=True)
class SizePoint:
    """One strategy at one state size: the medians over its runs."""

    source: str  # the result file
    strategy: str
    keys: int  # keys of state when the operation started
    value_bytes: int
    state_bytes: int | None  # keys and values as stored, read back after the run
    runs: int
    exact: bool
    total_s: float
    keys_moved: int | None
    bytes_moved: int | None
    transfer_s: float | None
    valid: bool
    load_at_start: float | None


@dataclass(frozen=True)
class Fit:
    """``seconds = t0_s + bytes / bytes_per_s`` by least squares."""

    t0_s: float
    bytes_per_s: float
    points: int
    r2: float

    def predict(self, moved: float) -> float:
        return self.t0_s + moved / self.bytes_per_s


def fit(xs: list[float], ys: list[float]) -> Fit | None:
    """The least-squares line through (bytes, seconds); None if it cannot be drawn (fewer than
    two distinct sizes, or a slope that is not positive: no rate to report)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if slope <= 0:
        return None
    t0 = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (t0 + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return Fit(t0, 1 / slope, len(xs), 1 - ss_res / ss_tot if ss_tot else 1.0)


@dataclass(frozen=True)
class Fit2:
    """``seconds = t0_s + keys / keys_per_s + bytes / bytes_per_s`` by least squares: a move
    costs per key (the stores' per-entry work) and per byte (copying, checksums, the disk)."""

    t0_s: float
    keys_per_s: float | None  # None: no measurable per-key cost (a coefficient <= 0)
    bytes_per_s: float | None
    points: int
    r2: float

    def predict(self, keys: float, moved: float) -> float:
        return (
            self.t0_s
            + (keys / self.keys_per_s if self.keys_per_s else 0.0)
            + (moved / self.bytes_per_s if self.bytes_per_s else 0.0)
        )


def fit2(keys: list[float], moved: list[float], ys: list[float]) -> Fit2 | None:
    """The two-term fit; None without three distinct (keys, bytes) sizes to tell them apart."""
    import numpy as np

    if len({(k, b) for k, b in zip(keys, moved, strict=True)}) < 3:
        return None
    a = np.column_stack([np.ones(len(ys)), keys, moved])
    coef, *_ = np.linalg.lstsq(a, np.asarray(ys, float), rcond=None)
    pred = a @ coef
    mean = float(np.mean(ys))
    ss_tot = float(sum((y - mean) ** 2 for y in ys))
    ss_res = float(sum((y - q) ** 2 for y, q in zip(ys, pred, strict=True)))
    return Fit2(
        t0_s=float(coef[0]),
        keys_per_s=1 / float(coef[1]) if coef[1] > 0 else None,
        bytes_per_s=1 / float(coef[2]) if coef[2] > 0 else None,
        points=len(ys),
        r2=1 - ss_res / ss_tot if ss_tot else 1.0,
    )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


Sample = tuple[float, float, float | None, float]  # bytes moved, total s, transfer s, keys moved


def points(path: Path) -> tuple[list[SizePoint], list[Sample]]:
    """The size points of one result file, and the all-at-once runs' (bytes moved, total s,
    transfer s, keys moved) for the fits."""
    report = json.loads(path.read_text("utf-8"))
    params = report["parameters"]
    keys = int(params["keys_at_operation"])
    value_bytes = int(params.get("value_bytes", 8))
    runner_state = [
        s["state_bytes"]
        for r in report["results"].values()
        for run in r["runs"]
        if (s := run.get("summary", {})).get("state_bytes")
    ]
    state_bytes = int(statistics.median(runner_state)) if runner_state else None
    load = common.dig(report, "machine", "load_avg_at_start")
    out: list[SizePoint] = []
    samples: list[Sample] = []
    for name, r in report["results"].items():
        ok = [run["summary"] for run in r["runs"] if "total_s" in run.get("summary", {})]
        if not ok:
            continue
        moved = [s["keys"].get("moved") or s["keys"].get("rewritten") for s in ok]
        moved_bytes = [s["keys"]["bytes_moved"] for s in ok if s["keys"].get("bytes_moved")]
        transfer = [s["keys"]["transfer_s"] for s in ok if s["keys"].get("transfer_s")]
        out.append(
            SizePoint(
                source=str(path),
                strategy=name,
                keys=keys,
                value_bytes=value_bytes,
                state_bytes=state_bytes,
                runs=len(ok),
                exact=common.all_exact(r["runs"]),
                total_s=float(statistics.median(s["total_s"] for s in ok)),
                keys_moved=int(statistics.median(m for m in moved if m is not None)),
                bytes_moved=int(statistics.median(moved_bytes)) if moved_bytes else None,
                transfer_s=_median(transfer),
                valid=bool(report.get("valid", False)),
                load_at_start=load[0] if load else None,
            )
        )
        if name == FITTED:
            samples += [
                (
                    float(s["keys"]["bytes_moved"]),
                    float(s["total_s"]),
                    s["keys"].get("transfer_s"),
                    float(s["keys"]["moved"]),
                )
                for s in ok
                if s["keys"].get("bytes_moved")
            ]
    return out, samples


def with_state_sizes(pts: list[SizePoint]) -> list[SizePoint]:
    """The points, those without a state size of their own taking the one of the same keys and
    value size from another file: Spark's route stores no state the benchmark measures, and a
    run of it kept in a file of its own would otherwise plot at 0 bytes."""
    known = {(p.keys, p.value_bytes): p.state_bytes for p in pts if p.state_bytes}
    return [
        p if p.state_bytes else replace(p, state_bytes=known.get((p.keys, p.value_bytes)))
        for p in pts
    ]


def _size_label(p: SizePoint) -> str:
    value = "1 KB states" if p.value_bytes > 8 else "counts"
    return f"{p.keys / 1e6:.1f}M {value}"


def table(pts: list[SizePoint], model: Fit2 | None) -> str:
    headers = ["size", "strategy", "runs", "total s", "model s", "moved", "MB moved", "exact"]
    rows = []
    for p in sorted(pts, key=lambda p: (p.state_bytes or 0, p.strategy)):
        modelled = (
            model.predict(p.keys_moved, p.bytes_moved)
            if model and p.bytes_moved and p.keys_moved
            else None
        )
        rows.append(
            [
                _size_label(p),
                LABELS.get(p.strategy, p.strategy),
                str(p.runs),
                f"{p.total_s:.1f}",
                f"{modelled:.1f}" if modelled is not None and p.strategy == FITTED else "",
                f"{p.keys_moved:,}" if p.keys_moved is not None else "",
                f"{p.bytes_moved / 1e6:,.0f}" if p.bytes_moved else "",
                "yes" if p.exact else "NO",
            ]
        )
    return common.format_table(headers, rows)


def plot(path: Path, pts: list[SizePoint], model: Fit2 | None) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    by_strategy: dict[str, list[SizePoint]] = {}
    for p in pts:
        if p.state_bytes:
            by_strategy.setdefault(p.strategy, []).append(p)
    for name, ps in sorted(by_strategy.items()):
        ps.sort(key=lambda p: p.state_bytes or 0)
        xs = [(p.state_bytes or 0) / 1e6 for p in ps]
        ax.plot(xs, [p.total_s for p in ps], marker="o", label=LABELS.get(name, name))
        for x, p in zip(xs, ps, strict=True):
            if name == FITTED:
                ax.annotate(_size_label(p), (x, p.total_s), fontsize=7, xytext=(4, -10),
                            textcoords="offset points")  # fmt: skip
    if model is not None and model.keys_per_s and model.bytes_per_s:
        ax.set_title(
            f"2->4 scale-out: time against state size; all-at-once = {model.t0_s:.1f} s + keys "
            f"moved / {model.keys_per_s / 1e6:.2f}M/s + bytes moved / "
            f"{model.bytes_per_s / 1e6:.0f} MB/s",
            fontsize=9,
        )
    ax.set_xscale("log")
    ax.set_xlabel("state size (MB of keys and values)")
    ax.set_ylabel("seconds, request to completed")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    common.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="bench/rescale.py JSON results")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/rescale_sizes.json")
    args = parser.parse_args(argv)
    pts, samples = [], []
    for path in args.results:
        p, s = points(path)
        pts += p
        samples += s
    pts = with_state_sizes(pts)
    total = fit([b for b, _, _, _ in samples], [t for _, t, _, _ in samples])
    both = fit2([k for *_, k in samples], [b for b, *_ in samples], [t for _, t, _, _ in samples])
    transfer_samples = [(b, x) for b, _, x, _ in samples if x]
    transfer = fit([b for b, _ in transfer_samples], [x for _, x in transfer_samples])
    small = [p for p in pts if p.strategy == FITTED and p.value_bytes <= 8]
    ratio = None
    if len(small) >= 2:
        lo, hi = min(small, key=lambda p: p.keys), max(small, key=lambda p: p.keys)
        ratio = {
            "keys": [lo.keys, hi.keys],
            "total_s": [lo.total_s, hi.total_s],
            "ratio": round(hi.total_s / lo.total_s, 2),
            "goal": "<= 4x",
            "met": hi.total_s / lo.total_s <= 4,
        }
    text = table(pts, both)
    report = {
        "benchmark": "rescale_sizes",
        "command": common.command_line(),
        "inputs": [str(p) for p in args.results],
        # a summary is valid only when every run it reads was
        "valid": all(p.valid for p in pts),
        "points": [asdict(p) for p in pts],
        "fit_total": asdict(total) if total else None,
        "fit_total_keys_and_bytes": asdict(both) if both else None,
        "fit_transfer": asdict(transfer) if transfer else None,
        "ratio_largest_over_smallest_counts": ratio,
        "table": text,
    }
    png = common.save_report(args.out, report, lambda path: plot(path, pts, both),
                             prefix=LOG_PREFIX)  # fmt: skip
    print(text)
    if total:
        print(
            f"\nall-at-once total = {total.t0_s:.2f} s + bytes moved / "
            f"{total.bytes_per_s / 1e6:.1f} MB/s (r2 {total.r2:.2f}, {total.points} runs)"
        )
    if both:
        per_key = f"{both.keys_per_s / 1e6:.2f}M keys/s" if both.keys_per_s else "no per-key cost"
        per_byte = f"{both.bytes_per_s / 1e6:.1f} MB/s" if both.bytes_per_s else "no per-byte cost"
        print(
            f"all-at-once total = {both.t0_s:.2f} s + keys moved / {per_key} + bytes moved / "
            f"{per_byte} (r2 {both.r2:.2f})"
        )
    if transfer:
        print(
            f"transfer alone = {transfer.t0_s:.2f} s + bytes moved / "
            f"{transfer.bytes_per_s / 1e6:.1f} MB/s (r2 {transfer.r2:.2f})"
        )
    if ratio:
        print(f"largest / smallest count state, all-at-once total: {ratio['ratio']}x (goal <= 4x)")
    print(f"\nwrote {args.out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
