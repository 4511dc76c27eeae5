"""How ``bench kernels`` times a call on a CPU: by the calling thread's CPU time when the row
runs on one thread, by the wall clock when it runs on more.

Why not the wall clock everywhere. On a machine shared with other work, a call's wall time also
counts the time the scheduler gave its core to someone else, and that time differs from call to
call by more than the effects a row is after. On the two-core machine this was written on,
under other engineers' load (load average 7 to 8), each call of three one-thread rows of one
sequence of 1,024 tokens timed by both clocks at once (62 rounds a row, in one process) gave
*paged ÷ in order* 1.027 to 1.032 with intervals of ±0.030 to ±0.032 on the thread's CPU clock,
1.025 to 1.048 with ±0.025 to ±0.074 on the wall clock; *FP8 ÷ fp32*'s intervals were ±0.027 to
±0.087 against ±0.061 to ±0.114. The CPU clock halves the worst intervals; what spread is left
is the calls' own: other programs' work on the other core shares the last-level cache and the
memory bus with them.

A thread's CPU time counts everything the call makes its core do or wait for while it holds
it, and so all that paging could cost: stalls on memory, cache and TLB misses, page-table
walks, a lower clock. It leaves out only the time the thread was off its core (the machine's
load, not the call) and any time the call sleeps: a planted ``time.sleep`` would not show, a
planted computation does.

Why only on one thread. A parallel loop's threads wait for each other at its end by spinning
(OpenMP's do, Numba's and torch's pools alike), and a spinning thread's clock runs as fast as a
working one's. On a loaded machine a thread whose partner is off its core spins for as long as
the scheduler lets it: a two-thread twin call over 1,024 tokens, which one thread does in
1.2 ms of CPU time, showed 1.6 to 3.0 ms on the caller's clock and 0.5 or 4.0 ms (a whole
scheduler slice of spinning) on the worker's, in 6.5 to 15 ms of wall time. No thread's clock,
nor their sum or maximum, is the loop's time then; the wall clock is, and a row on more
threads is to be read with its load (the tables print it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[Callable[[], object]], float]
"""Runs a call and returns the seconds it took by that clock."""


def thread_seconds(call: Callable[[], object]) -> float:
    """Run ``call`` and return the CPU time the calling thread spent in it."""
    start = time.thread_time()
    call()
    return time.thread_time() - start


def wall_seconds(call: Callable[[], object]) -> float:
    """Run ``call`` and return the wall time it took."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def for_threads(threads: int) -> Clock:
    """The clock for a CPU row on ``threads`` threads (the module's docstring says why)."""
    return thread_seconds if threads == 1 else wall_seconds
