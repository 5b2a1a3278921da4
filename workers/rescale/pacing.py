"""The granularity a request leaves to the plan: how many vnodes a step moves and how many steps
hold their vnodes at once, chosen from the plan's size and the measured rates.

A live operation moves its vnodes in *waves*: ``steps_in_flight`` steps are collected at one
barrier and acquired at the next. Every wave costs about one epoch, however little it moves, so
the fewer waves the sooner the operation ends (fluid's one vnode per step took 23 epochs and 68 s
for a small scale-out that all at once did in 20 s). But a wave's vnodes wait in hold queues from collect to
acquire, and their held records are all replayed in the acquire epoch: the larger a wave, the
larger that epoch's spike for the keys that stay. ``bench/results/rescale.json`` (256 vnodes,
2 → 4 PUs, 16 MB of state moved) shows both ends: a sixteenth of the vnodes per wave had the
lowest spike (1.59× the steady p99 gap) against 2.38× all at once, and took 16 s against 6.5 s;
fluid took 27 s and was not kinder (2.26×).

So the planner takes the fewest waves such that

* a wave holds at most :data:`WAVE_SHARE` of a fragment's vnodes (at most an eighth of its
  records wait and are replayed at once), and
* a wave's state transfers within about one epoch at the measured transfer rate (a wave of
  larger state would stretch its acquire epoch, and every record held with it, by the excess),

then steps as large as those waves allow, one step per (source, target) pair of PUs in each
wave. A plan of a few small vnodes is one wave: all at once.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from workers.rescale.protocol import FragmentPlan, Granularity, Move

# a wave holds at most this share of a fragment's vnodes
WAVE_SHARE = 1 / 8


def chosen_granularity(
    granularity: Granularity,
    moves: list[Move],
    fragments: dict[str, FragmentPlan],
    *,
    bytes_per_s: float,
    epoch_s: float,
) -> tuple[Granularity, str]:
    """The request's granularity with ``vnodes_per_step`` and ``steps_in_flight`` set where it
    left them out, and why they are what they are ("" when the request set both)."""
    if granularity.chosen:
        return granularity, ""
    if not moves:
        return replace(
            granularity,
            vnodes_per_step=granularity.vnodes_per_step or 1,
            steps_in_flight=granularity.steps_in_flight or 1,
        ), "nothing moves"
    per_fragment = Counter(m.fragment for m in moves)
    shares = {
        name: max(1, int(len(fragments[name].mapping_before) * WAVE_SHARE)) for name in per_fragment
    }
    by_share = max(math.ceil(count / shares[name]) for name, count in per_fragment.items())
    total_bytes = sum(m.bytes for m in moves)
    wave_bytes = max(1.0, bytes_per_s * epoch_s)  # what one epoch's transfer carries
    rate = granularity.bytes_per_second
    if rate is not None:  # the request's own cap on the rate: it also caps a wave
        wave_bytes = min(wave_bytes, max(1.0, rate * epoch_s))
    by_bytes = math.ceil(total_bytes / wave_bytes)
    pairs = Counter((m.fragment, m.source_pu, m.target_pu) for m in moves).values()
    largest, most_held, mean_bytes = max(pairs), min(shares.values()), total_bytes / len(moves)
    waves = min(max(1, by_share, by_bytes), len(moves))
    while True:
        # steps as large as ``waves`` waves allow, and as many in flight as make that many
        vnodes_per_step = granularity.vnodes_per_step or math.ceil(largest / waves)
        steps = sum(math.ceil(n / vnodes_per_step) for n in pairs)
        steps_in_flight = granularity.steps_in_flight or math.ceil(steps / waves)
        held = vnodes_per_step * steps_in_flight  # at most, in one wave
        if (
            waves >= len(moves)
            or (held <= most_held and held * mean_bytes <= wave_bytes)
            # what the request set leaves nothing smaller to choose
            or (granularity.vnodes_per_step is not None and steps_in_flight == 1)
            or (granularity.steps_in_flight is not None and vnodes_per_step == 1)
        ):
            break
        waves = min(waves + max(1, waves // 32), len(moves))  # rounding up overshot a bound
    waves = math.ceil(steps / steps_in_flight)
    chosen = replace(granularity, vnodes_per_step=vnodes_per_step, steps_in_flight=steps_in_flight)
    bound = (
        "one wave"
        if waves == 1
        else "at most an eighth of a fragment's vnodes held at once"
        if by_share >= by_bytes
        else f"a wave's state within one epoch's transfer ({_size(wave_bytes)})"
    )
    why = (
        f"chosen from the plan's size: {len(moves)} vnodes ({_size(total_bytes)}) in "
        f"{_count(waves, 'wave')} ({bound}), {_count(vnodes_per_step, 'vnode')} per step, "
        f"{_count(steps_in_flight, 'step')} in flight"
    )
    return chosen, why


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
