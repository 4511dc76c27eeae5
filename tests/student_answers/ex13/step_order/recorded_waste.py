"""Newcomers placed in the order the step lists them, not in order of sequence id.

Fails: fragmentation_stalls_of_a_recorded_run
"""

from __future__ import annotations

from collections.abc import Mapping

from minipaged.memory import external_fragmentation_stalls, paged_internal_waste, reservation_waste
from minipaged.study.baselines import ContiguousHeap
from minipaged.study.recorded_waste import RecordedRun


def paged_waste(run: RecordedRun) -> list[int]:
    return [
        sum(paged_internal_waste(n, run.block_size) for n in step.values()) for step in run.lengths
    ]


def static_waste(run: RecordedRun) -> list[int]:
    out = []
    for step in run.lengths:
        out.append(sum(run.max_length - run.final_lengths[i] for i in step))
    return out


def orca_waste(run: RecordedRun, delta: int) -> list[int]:
    return [sum(reservation_waste(n, delta) for n in step.values()) for step in run.lengths]


def fragmentation_stalls(run: RecordedRun, sizes: Mapping[int, int]) -> list[tuple[int, int]]:
    heap = ContiguousHeap(run.capacity)
    held: dict[int, int] = {}
    previous: set[int] = set()
    stalls = []
    for k, step in enumerate(run.lengths):
        now = set(step)
        for seq in sorted(previous - now):
            if seq in held:
                heap.release(held.pop(seq), sizes[seq])
        for seq in step:  # as the step lists them
            if seq in previous:
                continue
            start = heap.allocate(sizes[seq])
            if start is None:
                if external_fragmentation_stalls(heap.hole_sizes(), sizes[seq]):
                    stalls.append((k, seq))
            else:
                held[seq] = start
        previous = now
    return stalls
