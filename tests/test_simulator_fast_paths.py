"""The simulator's shortcuts change no decision.

``FastBlockManager.try_append`` and ``fork_replacing`` stand for ``can_append`` /
``append_slot`` and for ``fork`` then ``free``; the simulator's beam step forks each extra child
over an unpicked beam instead of forking every child before freeing every unpicked beam. Two
oracles:

1. random programs (allocate, append, beam steps, free, swap out and in; with and without each
   kind of prefix cache) run on a plain recording ``BlockManager`` in the old order and on a
   ``FastBlockManager`` with the shortcuts: after every operation the two snapshots (tables,
   refcounts, free lists in order, cached blocks) are equal;
2. whole simulations, small pools that preempt included, give the same result and the same
   tables and free list after every step with events recorded, with the plain calls unrecorded
   and with the shortcuts.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged.block_manager import BlockManager
from minipaged.fast_manager import FastBlockManager
from minipaged.study.baselines import PagedAllocator
from minipaged.study.simulator import Simulation, _rank_weights
from minipaged.study.workloads import make_workload

# -- 1. the block manager: plain calls against the combined steps ------------------------------

OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["allocate", "append", "append", "append", "beam", "free", "swap"]),
        st.integers(0, 10**6),  # which sequence, how long, which parents: read mod the choices
        st.lists(st.integers(0, 3), min_size=1, max_size=4),  # parent ranks of a beam step
    ),
    max_size=40,
)


class Pair:
    """The same program on a plain recording manager and on a fast silent one."""

    def __init__(self, num_gpu_blocks, num_cpu_blocks, block_size, prefix_caching) -> None:
        kwargs = dict(
            num_gpu_blocks=num_gpu_blocks,
            num_cpu_blocks=num_cpu_blocks,
            block_size=block_size,
            watermark=0.0,
            prefix_caching=prefix_caching,
        )
        self.plain = BlockManager(**kwargs)
        self.fast = FastBlockManager(**kwargs, record_events=False)
        self.next_seq = 0

    def device_seqs(self) -> list[int]:
        return [seq for seq, table in self.plain.tables.items() if table.pool == "device"]

    def allocate(self, n: int) -> None:
        rng = random.Random(n)
        tokens = [rng.randrange(2) for _ in range(1 + n % 9)]  # two symbols: prefixes repeat
        status = self.plain.can_allocate(tokens)
        assert self.fast.can_allocate(tokens) == status
        if status:
            for manager in (self.plain, self.fast):
                manager.allocate(self.next_seq, len(tokens), token_ids=tokens)
            self.next_seq += 1

    def append(self, seq: int) -> None:
        room = self.plain.can_append(seq)
        if room:
            self.plain.append_slot(seq)
        assert self.fast.try_append(seq) == room

    def beam(self, group: list[int], ranks: list[int]) -> None:
        """A beam step as the simulator takes it: every rank in ``ranks`` picks a parent of
        ``group``; the plain manager forks every extra child, then frees the unpicked beams."""
        parents = sorted(group[rank % len(group)] for rank in ranks[: len(group)])
        extra = [p for j, p in enumerate(parents) if j > 0 and parents[j - 1] == p]
        unpicked = [seq for seq in group if seq not in parents]
        assert len(extra) == len(unpicked)
        children = list(range(self.next_seq, self.next_seq + len(extra)))
        self.next_seq += len(extra)
        for parent, child in zip(extra, children, strict=True):
            self.plain.fork(parent, child)
        for seq in unpicked:
            self.plain.free(seq)
        for parent, child, seq in zip(extra, children, unpicked, strict=True):
            self.fast.fork_replacing(parent, child, seq)

    def swap(self, seq: int) -> None:
        if self.plain.table(seq).pool == "device":
            if self.plain.can_swap_out([seq]):
                assert self.plain.swap_out([seq]) == self.fast.swap_out([seq])
        elif self.plain.can_swap_in([seq]):
            assert self.plain.swap_in([seq]) == self.fast.swap_in([seq])


@settings(max_examples=150)
@given(
    num_gpu_blocks=st.integers(3, 24),
    num_cpu_blocks=st.sampled_from([0, 6]),
    block_size=st.sampled_from([1, 2, 4]),
    prefix_caching=st.sampled_from([None, "hash", "radix"]),
    program=OPERATIONS,
)
def test_fast_manager_steps_equal_the_plain_calls(
    num_gpu_blocks, num_cpu_blocks, block_size, prefix_caching, program
):
    pair = Pair(num_gpu_blocks, num_cpu_blocks, block_size, prefix_caching)
    for operation, n, ranks in program:
        seqs, device = list(pair.plain.tables), pair.device_seqs()
        if operation == "allocate":
            pair.allocate(n)
        elif operation == "append" and device:
            pair.append(device[n % len(device)])
        elif operation == "beam" and device:
            start = n % len(device)
            pair.beam(device[start : start + len(ranks)], ranks)
        elif operation == "free" and seqs:
            for manager in (pair.plain, pair.fast):
                manager.free(seqs[n % len(seqs)])
        elif operation == "swap" and seqs and num_cpu_blocks:
            pair.swap(seqs[n % len(seqs)])
        assert pair.fast.snapshot() == pair.plain.snapshot(), (operation, n, ranks)
    assert pair.fast.pop_events() == []


def test_fork_replacing_refuses_to_drop_the_parent():
    manager = FastBlockManager(8, block_size=4, record_events=False)
    manager.allocate(0, 5)
    with pytest.raises(ValueError, match="parent of the fork"):
        manager.fork_replacing(0, 1, 0)


def test_rank_weights_draw_the_same_beams_as_plain_weights():
    """The simulator passes ``random.choices`` cumulative weights it built once per $K$."""
    for k in range(1, 7):
        plain, cached = random.Random(k), random.Random(k)
        weights = [1 / (r + 1) for r in range(k)]
        for _ in range(200):
            drawn = cached.choices(range(k), cum_weights=_rank_weights(k), k=k)
            assert plain.choices(range(k), weights=weights, k=k) == drawn


# -- 2. whole simulations: recorded, plain and fast -----------------------------------------


class TracedSimulation(Simulation):
    """A ``Simulation`` that keeps the paged manager's tables and free list after each step."""

    trace: list

    def _decode(self) -> tuple[int, int]:
        out = super()._decode()
        manager = self.alloc.manager
        tables = {seq: (tuple(t.blocks), t.num_tokens) for seq, t in manager.tables.items()}
        self.trace.append((tables, manager.device.free_blocks()))
        return out


def run_paths(requests, spare_blocks: int, seed: int) -> list[tuple]:
    """(result, per-step trace, final snapshot) with events recorded, with the plain calls
    unrecorded, and with the shortcuts, on a pool with room for the largest request unshared
    (a preempted request comes back so) and ``spare_blocks`` more."""
    largest = max(len(r.output_lens) * -(-max(r.final_lens) // 16) for r in requests)
    num_blocks = largest + spare_blocks
    runs = []
    for recording, shortcuts in ((True, False), (False, False), (False, True)):
        alloc = PagedAllocator(num_blocks, block_size=16)
        alloc.manager.recording, alloc.manager.shortcuts = recording, shortcuts
        simulation = TracedSimulation(alloc, requests, seed)
        simulation.trace = []
        runs.append((simulation.run(), simulation.trace, alloc.manager.snapshot()))
    return runs


WORKLOADS = {
    "beam K=4": dict(lengths="enterprise", num_requests=8, beam_width=4, max_len=2048),
    "beam K=2 chat": dict(lengths="chat", num_requests=12, beam_width=2, max_len=2048),
    "n=3": dict(lengths="enterprise", num_requests=12, n=3, max_len=2048),
    "n=1 alpaca": dict(lengths="alpaca", num_requests=60),
}


@pytest.mark.parametrize("workload", WORKLOADS.values(), ids=WORKLOADS)
def test_simulation_decides_the_same_on_every_path(workload):
    requests = make_workload(**workload, seed=1)
    recorded, plain, fast = run_paths(requests, spare_blocks=40, seed=1)
    assert recorded == plain == fast
    assert fast[0].preemptions > 0, "the pool is small enough to preempt"


@settings(max_examples=8)
@given(
    kind=st.sampled_from([dict(beam_width=4), dict(beam_width=3), dict(n=2), dict()]),
    spare_blocks=st.integers(0, 30),
    seed=st.integers(0, 1000),
)
def test_random_simulations_decide_the_same_on_every_path(kind, spare_blocks, seed):
    requests = make_workload("alpaca", 8, seed=seed, **kind)
    recorded, plain, fast = run_paths(requests, spare_blocks, seed)
    assert recorded == plain == fast
