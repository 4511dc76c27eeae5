"""Interleaved rounds: how ``bench kernels`` times its paths, and how sure each of its ratios is.

A round calls every path once, in turn, so a change in the machine's load during a run touches
all of them alike; a ratio of two paths is then the median over rounds of their times' ratio
*in the same round* (``paired_ratio``), which cancels what the round shared. How sure that
median is comes from the rounds themselves: ``spread`` resamples them (a bootstrap) and gives
half the width of the interval that holds 95% of the resampled medians. A run takes rounds
until the ratios it must settle are within ``PRECISION`` of their value (``settled``), at
least ``MIN_ROUNDS`` and at most ``MAX_ROUNDS``: few on a quiet machine, more on a busy one.
Each call is timed by ``device_clock``: on a CPU, on one thread, the thread's CPU time, which
leaves out the time other work held its core (``cpu_clock`` says why, and why not on more
threads); otherwise the wall clock.

Why a call's neighbour matters, and what removes it: on this two-core machine, whichever of
two twin calls over different keys and values came second in a round ran 5 to 13% faster (at
L = 1,024, paged then in order gave paged ÷ in order 1.12; in order then paged, 0.91: the same
kernel, the same data, only the order swapped). A call inherits the state the calls before it
left: a twin call over 16 tokens took 0.1 ms right after the same call and 0.6 ms right after
a read of 64 MiB, which had evicted the dispatcher's, the wrapper's and the kernel's own code
and data. So every timed call is preceded by the same untimed read of a buffer larger than the
last-level cache (``before_each``): each call starts from the same state, whatever ran before
it. That still left a few percent: with the read before every call, in rounds timing paged
then in order, one thread, four sequences of 1,024 tokens, paged ÷ in order came out 1.033
and 1.046 (±0.02, two runs); with in order timed first, 1.004 and 1.007 (CPU time of the
calling thread, 151 rounds each, load 5 to 8 on two cores). Even an untimed call of the path
itself before the read, so that every call starts with its own code warm, left it so (1.033
against 1.007). Whatever a call still inherits, the order of the paths reverses from one
round to the next, so each of a pair runs second as often as first, and ``paired_ratio``
takes its median over the ratios' logarithms: a factor that favours the second path is
divided out of the ratio instead of leaning it one way.

Why not a fixed count: with 9 rounds on this two-core machine under a load of about 5, the
95% interval of *paged ÷ in order* at L = 1,024 spanned 0.96 to 1.18, wide enough to read a
noisy 1.10 as a 10% cost of paging; 49 rounds narrowed it to 1.02 to 1.11 (ratio of medians)
and 1.03 to 1.06 (median of the rounds' own ratios, the one used here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import numpy as np
import torch

from minipaged.study.bench import cpu_clock

MIN_ROUNDS = 10
"""The fewest rounds a full run takes, whatever the spread says after fewer: even, as a run
that settles stops only after an even count, each order of the paths as often as the other."""

MAX_ROUNDS = 62
"""The most: on a machine too busy to settle, a run ends here and prints the spread it got."""

PRECISION = 0.02
"""A settled ratio's 95% interval reaches at most 2% of its value either side."""

RESAMPLES = 2000
"""Bootstrap resamples per spread: enough that the interval's ends move by well under 1%."""

Times = dict[str, list[float]]
"""Each path's time in seconds, round by round: ``times[path][i]`` is round ``i``'s."""


def time_rounds(
    paths: dict[str, Callable[[], object]],
    device: str,
    min_rounds: int,
    max_rounds: int,
    settled: Callable[[Times], bool] = lambda times: True,
    only_first: Collection[str] = (),
    before_each: Callable[[], object] = lambda: None,
    clock: cpu_clock.Clock | None = None,
) -> Times:
    """Each path's time (``clock``) in every round, after one warm-up call each (first-call
    allocation and, on a GPU, compilation). Each round takes the paths in the reverse of the
    last one's order. Rounds go on past ``min_rounds`` until ``settled(times)`` after an even
    count, or ``max_rounds``; the paths named in ``only_first`` (slow ones that no
    settling ratio needs) take part in the first ``min_rounds`` only, so their lists are
    shorter, and a ratio with them pairs those first rounds. ``before_each`` runs, untimed,
    before every timed call, so that each call starts from the state it leaves rather than
    from what the path before it in the round left (``bandwidth.cache_evictor``). ``clock``
    runs a call and gives its seconds; by default ``device_clock(device, torch's threads)``."""
    if not 1 <= min_rounds <= max_rounds:
        raise ValueError(
            f"rounds must satisfy 1 <= min_rounds <= max_rounds, got {min_rounds} and "
            f"{max_rounds}: give at least one round, and a maximum no smaller than the minimum"
        )
    clock = clock or device_clock(device, torch.get_num_threads())
    for fn in paths.values():
        fn()
    times: Times = {name: [] for name in paths}
    order = list(paths.items())
    while True:
        for name, fn in order:
            if name in only_first and len(times[name]) >= min_rounds:
                continue
            before_each()
            times[name].append(clock(fn))
        order.reverse()  # every pair of paths is timed in both orders, round by round
        rounds = max(len(t) for t in times.values())
        if rounds >= max_rounds or (rounds >= min_rounds and rounds % 2 == 0 and settled(times)):
            return times


def device_clock(device: str, threads: int) -> cpu_clock.Clock:
    """How a run on ``device`` with torch on ``threads`` threads times a call: on a GPU the
    wall clock, the host waiting for the device before and after (the host's CPU clocks do not
    see a GPU's work); on a CPU ``cpu_clock.for_threads``: the thread's CPU time on one thread,
    which leaves out the time other work held its core, the wall clock on more."""
    if device == "cuda":
        return synchronized_wall_seconds
    return cpu_clock.for_threads(threads)


def synchronized_wall_seconds(call: Callable[[], object]) -> float:
    """A GPU call's wall time: from an idle device to the call's last kernel done."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def median_ms(times: list[float]) -> float:
    return float(np.median(times)) * 1e3


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of ``numerator[i] / denominator[i]``: two paths' ratio with
    what each round shared (the load, the clock, the cache others left) divided out. Over the
    rounds both took part in: the first, when one list is shorter (``only_first``). Taken
    over the ratios' logarithms, so that of an even count the middle two meet at their
    geometric mean: rounds that time a pair in opposite orders (``time_rounds``) and so
    favour each path in turn by the same factor give back their shared ratio."""
    rounds = min(len(numerator), len(denominator))
    return float(np.exp(np.median(log_ratios(numerator[:rounds], denominator[:rounds]))))


def log_ratios(numerator: list[float], denominator: list[float]) -> np.ndarray:
    return np.log(np.divide(numerator, denominator))


def spread(numerator: list[float], denominator: list[float], seed: int = 0) -> float:
    """Half the width of the 95% percentile-bootstrap interval of ``paired_ratio``: the
    rounds drawn again with replacement ``RESAMPLES`` times, the middle 95% of the medians.
    Deterministic for a given ``seed``."""
    logs = log_ratios(numerator, denominator)
    draws = np.random.default_rng(seed).integers(0, len(logs), (RESAMPLES, len(logs)))
    low, high = np.exp(np.percentile(np.median(logs[draws], axis=1), [2.5, 97.5]))
    return float(high - low) / 2


def ratios_settled(pairs: list[tuple[str, str]], precision: float = PRECISION):
    """A ``settled`` test for ``time_rounds``: every ``(numerator, denominator)`` pair of paths
    has a spread within ``precision`` of its paired ratio."""

    def settled(times: Times) -> bool:
        return all(
            spread(times[a], times[b]) <= precision * paired_ratio(times[a], times[b])
            for a, b in pairs
        )

    return settled
