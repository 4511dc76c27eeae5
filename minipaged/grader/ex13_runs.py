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
come back. Generated runs (a set the same at every grading, then a set drawn anew) add what
two runs cannot: $B = 1$, lengths that fill their last block exactly, one-token sequences,
sequences at $L_{\\max}$.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

from minipaged.study import recorded_waste as library
from minipaged.study.recorded_waste import RecordedRun

RUNS = Path(__file__).resolve().parent / "recorded_runs"

MAX_LENGTH = 64
"""$L_{\\max}$ of the recorded runs: the tiny model's sequences there end at 38 tokens at most."""

STALL_CAPACITY = {"queued": 96, "preempted": 64}
"""A pool, in slots, in which each recorded run's oracle-sized contiguous buffers meet one
stall (sequence 5 at step 24 of ``queued``; sequence 3 at step 28 of ``preempted``)."""

GENERATED = 60
"""Generated runs in each set: one the same at every grading (``SEED``), one drawn anew."""

SEED = 13
"""The seed of the generated runs every grading checks first: a bug shows the same way at
each grading."""

_DRAWS = random.SystemRandom()
"""The seed of the runs each grading checks next, from the system's random source: with the
runs derandomized, a hand-in answering from the library's series for them, stored at home,
passed (``tests/hostile_corpus.py``, ``STORED_SERIES``)."""

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


def slot_run(*lengths: dict[int, int]) -> RecordedRun:
    """A run in a pool of 10 one-token blocks whose sequences hold ``lengths`` at each step:
    with $B = 1$ a sequence's blocks are its length, so each buffer the stall checks place is
    as long as its sequence."""
    return RecordedRun(block_size=1, capacity=10, max_length=10, lengths=lengths, blocks=lengths)


NEWCOMERS_LISTED_OUT_OF_ORDER = slot_run(
    {0: 3, 1: 2, 2: 2, 3: 3}, {1: 2, 3: 3}, {1: 2, 3: 3, 5: 2, 4: 3}
)
"""Holes of 3 and 2 after step 1, and two newcomers at step 2, listed 5 first: in order of id,
sequence 4 takes the hole of 3 and 5 the hole of 2; placed as listed, 5 takes two slots of the
hole of 3 and 4 stalls."""


NEWCOMERS_IN_A_SET = slot_run({0: 3, 1: 2, 2: 2, 3: 3}, {1: 2, 3: 3}, {1: 2, 3: 3, 9: 3, 16: 2})
"""The holes of ``NEWCOMERS_LISTED_OUT_OF_ORDER``, and newcomers 9 and 16, listed in order of
id: 9 takes the hole of 3 and 16 the hole of 2. A set of them ({9, 16}) is no order: Python
walks it 16 first (16 and 9 fall in slots 0 and 1 of its table), and then 16 takes two slots of
the hole of 3 and 9 stalls. (A set of ids below 8 walks them in order, by chance.)"""


LEAVE_AS_ONE_ARRIVES = slot_run({0: 2, 1: 2, 2: 2, 3: 2}, {0: 2, 2: 2, 3: 2}, {0: 2, 3: 2, 4: 1})
"""Sequence 2 leaves in the step sequence 4 asks for 4 slots: released first, its buffer joins
sequence 1's hole and holds the request; placed first, the request finds two holes of 2."""


@functools.cache
def recorded(name: str) -> RecordedRun:
    """The recorded run ``name`` (``queued`` or ``preempted``), loaded once."""
    return library.load(RUNS / f"{name}.jsonl", MAX_LENGTH)


def _often_an_end(rng: random.Random, low: int, high: int) -> int:
    """An integer in ``[low, high]``, one of the two ends two times in five: the edges (one
    token, a full last block, $L_{\\max}$) come often, as hypothesis's draws made them."""
    pick = rng.random()
    return low if pick < 0.2 else high if pick < 0.4 else rng.randint(low, high)


def _fragmented_run(rng: random.Random) -> RecordedRun:
    """A run made to fragment a pool that is full at step 0: some of its sequences leave at
    step 1, leaving holes between those that stay, and newcomers of every size arrive, one or
    two a step, the higher id listed first (they ask in order of id all the same). Grown runs
    stall rarely (about one in seventy); about a third of these do."""
    sizes = [_often_an_end(rng, 1, 8) for _ in range(rng.randint(3, 8))]
    staying = {s: n for s, n in enumerate(sizes) if rng.random() < 0.5}
    freed = sum(sizes) - sum(staying.values())
    steps, seq = [dict(enumerate(sizes)), dict(staying)], len(sizes)
    for _ in range(rng.randint(1, 3)):
        arriving = range(seq + rng.randint(1, 2) - 1, seq - 1, -1)
        steps.append({new: _often_an_end(rng, 1, freed + 2) for new in arriving} | staying)
        seq += len(arriving)
    lengths = tuple(steps)
    block_size = rng.choice((1, 2, 3, 4, 16))
    blocks = tuple({s: -(-n // block_size) for s, n in ls.items()} for ls in lengths)
    max_length = max(n for ls in lengths for n in ls.values())
    return RecordedRun(block_size, sum(sizes) + rng.randint(0, 2), max_length, lengths, blocks)


def generated_run(rng: random.Random, draw_capacity: bool = False) -> RecordedRun:
    """A small ``RecordedRun``: up to 6 sequences, each arriving at some step with a prompt
    of $P \\ge 1$ tokens and growing one token a step to its $L_i \\le L_{\\max}$, some
    leaving for a few steps (preempted) and coming back. The pool holds every sequence's
    $L_{\\max}$ at once, or with ``draw_capacity`` anything from one $L_{\\max}$ up; then half
    the runs are ``_fragmented_run``'s instead, for the stalls."""
    if draw_capacity and rng.random() < 0.5:
        return _fragmented_run(rng)
    block_size = rng.choice((1, 2, 3, 4, 16))
    max_length = _often_an_end(rng, 1, 40)
    seqs = _often_an_end(rng, 1, 6)
    timelines: dict[int, dict[int, int]] = {}  # seq -> step -> length
    for seq in range(seqs):
        step = _often_an_end(rng, 0, 5)
        length = _often_an_end(rng, 1, max_length)
        final = _often_an_end(rng, length, max_length)
        timelines[seq] = {step: length}
        while length < final:
            length += 1
            step += 1 + (rng.randint(0, 3) if rng.random() < 0.5 else 0)
            timelines[seq][step] = length
    steps = max(max(t) for t in timelines.values()) + 1
    listed = list(timelines)  # a step lists its sequences in any order, not by id
    rng.shuffle(listed)
    lengths = tuple({s: timelines[s][k] for s in listed if k in timelines[s]} for k in range(steps))
    blocks = tuple({s: -(-n // block_size) for s, n in ls.items()} for ls in lengths)
    capacity = seqs * max_length
    if draw_capacity:
        capacity = _often_an_end(rng, max_length, capacity)
    return RecordedRun(block_size, capacity, max_length, lengths, blocks)


def generated_runs(seed: int, draw_capacity: bool = False) -> list[RecordedRun]:
    """``GENERATED`` runs of ``generated_run``; the same ``seed`` gives the same runs."""
    rng = random.Random(seed)
    return [generated_run(rng, draw_capacity) for _ in range(GENERATED)]


def for_generated_runs(check_one, draw_capacity: bool = False) -> None:
    """Run ``check_one(run, name)`` on ``EDGES``, then on the ``GENERATED`` runs of seed
    ``SEED``, then on as many drawn for this grading; the first failure is the one reported
    (no shrinking: each try is a call into the student's code), under a name that says how to
    make its run again."""
    check_one(EDGES, "the edge run (a full last block, one token, L_max)")
    capacity = ", draw_capacity=True" if draw_capacity else ""
    for seed in (SEED, _DRAWS.randrange(2**32)):
        drawn = ", drawn for this grading" if seed != SEED else ""
        for i, run in enumerate(generated_runs(seed, draw_capacity)):
            name = f"generated_runs(seed={seed}{capacity})[{i}] of minipaged.grader.ex13_runs"
            check_one(run, name + drawn)
