"""The runs exercise 13's checks measure (``ex13_three_wastes``): two runs the engine recorded,
small runs built by hand for the edges, and generated runs.

The two recorded runs ship beside this module (``recorded_runs/``), made with the embedded
model by::

    minipaged trace record queued.jsonl --prompt "It is a truth universally acknowledged" \\
        --prompt "Jane smiled" --prompt "My dear Mr. Bennet, said his lady to him one day" \\
        --prompt "Elizabeth looked at her sister" --prompt "Mr. Darcy" \\
        --prompt "The village of Longbourn, where the family lived, was near" \\
        --max-tokens 20 --block-size 4 --num-gpu-blocks 20 --seed 1
    minipaged trace record preempted.jsonl --prompt "It is a truth universally acknowledged" \\
        --prompt "Jane smiled" --prompt "My dear Mr. Bennet, said his lady" \\
        --prompt "Elizabeth looked at her sister" --max-tokens 24 --ignore-eos \\
        --block-size 4 --num-gpu-blocks 14 --preemption recompute --seed 2

Both queue requests and preempt some by recomputation, so sequences leave the device and
come back. Generated runs (hypothesis, derandomized, no shrinking) add what two runs cannot:
$B = 1$, lengths that fill their last block exactly, one-token sequences, sequences at
$L_{\\max}$.
"""

from __future__ import annotations

import functools
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from minipaged.study import recorded_waste as library
from minipaged.study.recorded_waste import RecordedRun

RUNS = Path(__file__).resolve().parent / "recorded_runs"

MAX_LENGTH = 64
"""$L_{\\max}$ of the recorded runs: the tiny model's sequences there end at 38 tokens at most."""

STALL_CAPACITY = {"queued": 96, "preempted": 64}
"""A pool, in slots, in which each recorded run's oracle-sized contiguous buffers meet one
stall (sequence 5 at step 24 of ``queued``; sequence 3 at step 28 of ``preempted``)."""

GENERATED = 60
"""Generated runs per criterion: the same ones on every machine (derandomized)."""

EDGES = RecordedRun(
    block_size=4,
    capacity=32,
    max_length=8,
    lengths=({0: 3, 1: 1, 2: 7}, {0: 4, 2: 8}, {0: 5}, {0: 6, 3: 2}, {3: 3}),
    blocks=({0: 1, 1: 1, 2: 2}, {0: 1, 2: 2}, {0: 2}, {0: 2, 3: 1}, {3: 1}),
)
"""The edges, in one small run checked before the generated ones: sequence 0 fills its last
block exactly at step 1 ($l = B = 4$), then starts a new one; sequence 1 is one token long;
sequence 2 ends at $L_{\\max} = 8$, which fills two blocks; sequence 3 arrives after two
have left."""


LEAVE_AS_ONE_ARRIVES = RecordedRun(
    block_size=1,
    capacity=10,
    max_length=10,
    lengths=({0: 2, 1: 2, 2: 2, 3: 2}, {0: 2, 2: 2, 3: 2}, {0: 2, 3: 2, 4: 1}),
    blocks=({0: 2, 1: 2, 2: 2, 3: 2}, {0: 2, 2: 2, 3: 2}, {0: 2, 3: 2, 4: 1}),
)
"""Sequence 2 leaves in the step sequence 4 asks for 4 slots: released first, its buffer joins
sequence 1's hole and holds the request; placed first, the request finds two holes of 2."""


@functools.cache
def recorded(name: str) -> RecordedRun:
    """The recorded run ``name`` (``queued`` or ``preempted``), loaded once."""
    return library.load(RUNS / f"{name}.jsonl", MAX_LENGTH)


def generated_runs(draw_capacity: bool = False):
    """A strategy of small ``RecordedRun``s: up to 6 sequences, each arriving at some step
    with a prompt of $P \\ge 1$ tokens and growing one token a step to its $L_i \\le
    L_{\\max}$, some leaving for a few steps (preempted) and coming back."""

    @st.composite
    def runs(draw) -> RecordedRun:
        block_size = draw(st.sampled_from((1, 2, 3, 4, 16)))
        max_length = draw(st.integers(1, 40))
        seqs = draw(st.integers(1, 6))
        timelines: dict[int, dict[int, int]] = {}  # seq -> step -> length
        for seq in range(seqs):
            step = draw(st.integers(0, 5))
            length = draw(st.integers(1, max_length))
            final = draw(st.integers(length, max_length))
            timelines[seq] = {}
            while True:
                timelines[seq][step] = length
                if length == final:
                    break
                length += 1
                step += 1 + (draw(st.integers(0, 3)) if draw(st.booleans()) else 0)
        steps = max(max(t) for t in timelines.values()) + 1
        lengths = tuple({s: t[k] for s, t in timelines.items() if k in t} for k in range(steps))
        blocks = tuple({s: -(-n // block_size) for s, n in ls.items()} for ls in lengths)
        capacity = seqs * max_length
        if draw_capacity:
            capacity = draw(st.integers(max_length, capacity))
        return RecordedRun(block_size, capacity, max_length, lengths, blocks)

    return runs()


def for_generated_runs(check_one, draw_capacity: bool = False) -> None:
    """Run ``check_one(run, name)`` on ``EDGES``, then on ``GENERATED`` generated runs; the
    first failure is the one reported (no shrinking: each try is a call into the student's
    code)."""
    check_one(EDGES, "the edge run (a full last block, one token, L_max)")

    @settings(
        max_examples=GENERATED,
        derandomize=True,
        deadline=None,
        database=None,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(generated_runs(draw_capacity))
    def each(run):
        check_one(run, "a generated run")

    each()
