"""The simulator's shortcuts change no decision.

``minipaged.study.fast_manager.FastBlockManager`` keeps no events, and its ``try_append`` and
``fork_replacing`` stand for ``can_append`` / ``append_slot`` and for ``fork`` then ``free``;
the simulator's beam step forks each extra child over an unpicked beam instead of forking every
child before freeing every unpicked beam, and grows a whole group in one loop when none of its
sequences ends. Three oracles:

1. random programs (allocate, append, beam steps, free, swap out and in) run on the core
   ``BlockManager`` in the old order and on a ``FastBlockManager``: after every operation the
   two snapshots (tables, refcounts, free lists in order) are equal;
2. whole simulations, small pools that preempt included, give the same result and the same
   tables and free list after every step on the core manager's plain calls (every event
   recorded) and on the fast manager;
3. on every allocator, the simulator's group growth against its sequence-by-sequence loop, with
   its running sums recounted from scratch after every step.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged.block_manager import BlockManager
from minipaged.study.baselines import (
    OrcaAllocator,
    PagedAllocator,
    StaticAllocator,
    VAttentionAllocator,
)
from minipaged.study.fast_manager import FastBlockManager
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
    """The same program on the core manager and on the simulator's fast one."""

    def __init__(self, num_gpu_blocks, num_cpu_blocks, block_size) -> None:
        kwargs = dict(num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks)
        self.plain = BlockManager(**kwargs, block_size=block_size, watermark=0.0)
        self.fast = FastBlockManager(**kwargs, block_size=block_size)
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
    program=OPERATIONS,
)
def test_fast_manager_steps_equal_the_plain_calls(
    num_gpu_blocks, num_cpu_blocks, block_size, program
):
    pair = Pair(num_gpu_blocks, num_cpu_blocks, block_size)
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
    manager = FastBlockManager(8, block_size=4)
    manager.allocate(0, 5)
    with pytest.raises(ValueError, match="parent of the fork"):
        manager.fork_replacing(0, 1, 0)


def test_the_core_block_manager_always_records_and_the_fast_one_never_does():
    core, fast = BlockManager(8, block_size=4), FastBlockManager(8, block_size=4)
    for manager in (core, fast):
        manager.allocate(0, 5)
        manager.fork(0, 1)
        manager.free(1)
    assert [event.kind for event in core.pop_events()] == [
        *["alloc"] * 2,
        "fork",
        *["incref"] * 2,
        *["decref"] * 2,
    ]
    assert fast.pop_events() == []
    assert fast.snapshot() == core.snapshot()


def test_rank_weights_draw_the_same_beams_as_plain_weights():
    """The simulator passes ``random.choices`` cumulative weights it built once per $K$."""
    for k in range(1, 7):
        plain, cached = random.Random(k), random.Random(k)
        weights = [1 / (r + 1) for r in range(k)]
        for _ in range(200):
            drawn = cached.choices(range(k), cum_weights=_rank_weights(k), k=k)
            assert plain.choices(range(k), weights=weights, k=k) == drawn


# -- 2. whole simulations: the core manager's plain calls and the fast manager ----------------


class PlainPagedAllocator(PagedAllocator):
    """The paged allocator on the core ``BlockManager`` (every event recorded), growing by
    ``can_append`` / ``append_slot`` and replacing a beam by ``fork`` then ``free``."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self.manager = BlockManager(num_blocks, block_size=block_size, watermark=0.0)

    def grow(self, seq: int) -> bool:
        if not self.manager.can_append(seq):
            return False
        self.manager.append_slot(seq)
        return True

    def fork_replacing(self, parent: int, child: int, dropped: int) -> None:
        self.manager.fork(parent, child)
        self.manager.free(dropped)


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
    """(result, per-step trace, final snapshot) on the core manager's plain calls and on the
    fast manager, on a pool with room for the largest request unshared (a preempted request
    comes back so) and ``spare_blocks`` more."""
    largest = max(len(r.output_lens) * -(-max(r.final_lens) // 16) for r in requests)
    num_blocks = largest + spare_blocks
    runs = []
    for allocator in (PlainPagedAllocator, PagedAllocator):
        alloc = allocator(num_blocks, block_size=16)
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
    plain, fast = run_paths(requests, spare_blocks=40, seed=1)
    assert plain == fast
    assert fast[0].preemptions > 0, "the pool is small enough to preempt"


@settings(max_examples=8)
@given(
    kind=st.sampled_from([dict(beam_width=4), dict(beam_width=3), dict(n=2), dict()]),
    spare_blocks=st.integers(0, 30),
    seed=st.integers(0, 1000),
)
def test_random_simulations_decide_the_same_on_every_path(kind, spare_blocks, seed):
    requests = make_workload("alpaca", 8, seed=seed, **kind)
    plain, fast = run_paths(requests, spare_blocks, seed)
    assert plain == fast


# -- 3. the simulator's own shortcut and running sums, on every allocator ---------------------


def allocator_state(alloc) -> tuple:
    """Everything an allocator decides with: tables and free list, or buffers and holes."""
    if isinstance(alloc, PagedAllocator):
        manager = alloc.manager
        tables = {seq: (tuple(t.blocks), t.num_tokens) for seq, t in manager.tables.items()}
        return tables, manager.device.free_blocks()
    if isinstance(alloc, VAttentionAllocator):
        return dict(alloc._lengths), {seq: alloc.page_table(seq) for seq in alloc._lengths}
    holes = [tuple(hole) for hole in alloc.heap.holes]
    return dict(alloc._buffers), dict(alloc._lengths), holes, alloc.stalls


class RecountedSimulation(Simulation):
    """A ``Simulation`` that recounts its running sums from scratch after each step (spans
    asked of the allocator) and keeps each step's counts, sums and allocator state."""

    trace: list

    def _decode(self) -> tuple[int, int]:
        out = super()._decode()
        live = [(group, i) for group in self.running for i in range(len(group.seqs))]
        spans = {(id(g), i): self.alloc.reserved_slots(g.seqs[i]) for g, i in live}
        assert [g.spans[i] for g, i in live] == list(spans.values()), "a stale span r_i"
        pairs = [(spans[id(g), i], g.finals[i]) for g, i in live]
        recount = {
            "seqs": len(live),
            "length": sum(g.lengths[i] for g, i in live),
            "spans": sum(span for span, _ in pairs),
            "internal": sum(max(0, span - final) for span, final in pairs),
            "bounded": sum(min(span, final) for span, final in pairs),
        }
        assert vars(self.totals) == recount
        self.trace.append((out, recount, self.alloc.stalls, allocator_state(self.alloc)))
        return out


ALLOCATORS = {
    "paged": lambda spare: PagedAllocator(4 * 512 // 16 + spare, block_size=16),
    "static": lambda spare: StaticAllocator(4 * 512 + 16 * spare),
    "orca": lambda spare: OrcaAllocator(8 * 512 + 16 * spare, delta=64),  # room to relocate
    "vattention": lambda spare: VAttentionAllocator(4 * 512 + 16 * spare, page_size=32),
}


def run_recounted(name: str, requests, spare: int, seed: int, shortcuts: bool) -> tuple:
    simulation = RecountedSimulation(ALLOCATORS[name](spare), requests, seed)
    simulation.trace, simulation.shortcuts = [], shortcuts
    return simulation.run(), simulation.trace


@settings(max_examples=40)
@given(
    name=st.sampled_from(list(ALLOCATORS)),
    lengths=st.sampled_from(["chat", "chat", "alpaca"]),
    kind=st.sampled_from([dict(beam_width=4), dict(beam_width=3), dict(n=3), dict()]),
    spare=st.integers(0, 40),
    seed=st.integers(0, 1000),
)
def test_growing_a_group_at_once_decides_as_sequence_by_sequence(name, lengths, kind, spare, seed):
    """``_grow_unfinished`` against the plain ``_grow`` loop, and both sets of running sums
    against a recount, after every step; small caches preempt in the middle of a group."""
    requests = make_workload(lengths, 10, seed=seed, max_len=512, **kind)
    plain = run_recounted(name, requests, spare, seed, shortcuts=False)
    assert run_recounted(name, requests, spare, seed, shortcuts=True) == plain


class CountedSimulation(RecountedSimulation):
    """Counts the rare paths: a group that grew only in part before a preemption, and a beam
    that replaced a dropped one of another length."""

    partial = uneven = 0

    def _grow_unfinished(self, group) -> int:
        grown = super()._grow_unfinished(group)
        self.partial += grown < len(group.lengths)
        return grown

    def _replace(self, group, gone: int, parent: int) -> None:
        self.uneven += group.lengths[gone] != group.lengths[parent]
        super()._replace(group, gone, parent)


def test_the_recount_reaches_preemptions_in_the_middle_of_a_beam_group():
    """The property above reaches the rare paths on such a workload: some beams of a group grew
    before it was preempted, so its beams' lengths differ when it branches again."""
    requests = make_workload("chat", 10, seed=0, max_len=512, beam_width=4)
    simulation = CountedSimulation(ALLOCATORS["paged"](0), requests, seed=0)
    simulation.trace = []
    simulation.run()
    assert simulation.partial > 0 and simulation.uneven > 0
