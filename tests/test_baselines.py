"""The baseline allocators and the paged adapter, against the source text's formulas (§2, §3)
and, for Orca's external fragmentation, against a brute-force definition over a slot map."""

import math
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from minipaged import memory
from minipaged.study.baselines import (
    ContiguousHeap,
    OrcaAllocator,
    PagedAllocator,
    StaticAllocator,
    VAttentionAllocator,
    page_tokens,
)
from minipaged.study.orca_baselines import (
    OrcaReservationAllocator,
    next_power_of_two,
    orca_reservation,
)


def grow_to(alloc, seq, start: int, length: int) -> None:
    for _ in range(length - start):
        assert alloc.grow(seq)


@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_paged_waste_equals_half_a_block_on_uniform_remainders(block_size):
    alloc = PagedAllocator(num_blocks=4096, block_size=block_size)
    # One sequence for each remainder L mod B in {0, ..., B-1}, grown token by token.
    lengths = [3 * block_size + r for r in range(block_size)]
    for seq, length in enumerate(lengths):
        assert alloc.admit(seq, 1, 8192)
        grow_to(alloc, seq, 1, length)
    unused = sum(alloc.reserved_slots(seq) - length for seq, length in enumerate(lengths))
    assert Fraction(unused, len(lengths)) == memory.expected_paged_waste(block_size)
    assert alloc.reserved - sum(lengths) == unused  # no sharing: the tables' sum is the pool's


def test_static_waste_matches_the_source_texts_formula():
    lengths = [700, 800, 900, 1000, 1100, 1200]
    alloc = StaticAllocator(capacity=len(lengths) * 8192)
    for seq, length in enumerate(lengths):
        assert alloc.admit(seq, 500, 8192)
        grow_to(alloc, seq, 500, length)
    unused = sum(alloc.reserved_slots(seq) - length for seq, length in enumerate(lengths))
    expected = memory.expected_static_internal_waste(lengths, 8192, num_requests=len(lengths))
    assert unused == expected == len(lengths) * (8192 - 950)
    assert alloc.reserved == alloc.capacity


def test_orca_reserves_in_increments_of_delta():
    alloc = OrcaAllocator(capacity=4096, delta=256)
    assert alloc.admit("r", 1, 8192)
    for t in range(1, 2000):
        assert alloc.reserved_slots("r") - t == memory.reservation_waste(t, 256)
        assert alloc.grow("r")


def test_orca_stalls_when_free_memory_is_split_into_holes_too_small():
    # [a: 8][b: 8][c: 8][free: 8]; freeing a and c leaves 24 slots free in holes of 8 and 16.
    alloc = OrcaAllocator(capacity=32, delta=8)
    for seq in "abc":
        assert alloc.admit(seq, 8, 64)
    alloc.release("a")
    alloc.release("c")
    assert alloc.heap.hole_sizes() == [8, 16]
    assert not alloc.admit("d", 17, 64)  # needs 24 contiguous slots; 24 are free in total
    assert alloc.stalls == 1
    assert not alloc.admit("e", 30, 64)  # needs 32: more than is free, so not a stall
    assert alloc.stalls == 1


def _runs(free: list[bool]) -> list[int]:
    """Brute force: the lengths of the maximal runs of free slots."""
    runs, current = [], 0
    for slot_free in [*free, False]:
        if slot_free:
            current += 1
        elif current:
            runs, current = [*runs, current], 0
    return runs


def _slot_map(alloc: OrcaAllocator, skip=None) -> list[bool]:
    free = [True] * alloc.capacity
    for seq, (start, size) in alloc._buffers.items():
        if seq != skip:
            for i in range(start, start + size):
                assert free[i], "two buffers overlap"
                free[i] = False
    return free


def _brute_force_stall(free: list[bool], need: int) -> bool:
    runs = _runs(free)
    return max(runs, default=0) < need <= sum(runs)


operations = st.lists(
    st.tuples(st.sampled_from(["admit", "grow", "release"]), st.integers(0, 4), st.integers(1, 8)),
    max_size=80,
)
# A buffer that can only grow by moving into the hole just before it: b is released after a
# was admitted, then a fills its buffer and the slots after it are taken.
RELOCATE_BACKWARDS = [
    ("admit", 0, 4),
    ("admit", 1, 4),
    ("admit", 2, 4),
    ("release", 0, 1),
    ("admit", 3, 8),
    *[("grow", 1, 1)] * 5,
]


@example(RELOCATE_BACKWARDS)
@given(operations)
def test_orca_refuses_and_stalls_exactly_when_no_hole_fits(ops):
    alloc = OrcaAllocator(capacity=24, delta=4)
    for op, seq, size in ops:
        live = seq in alloc._buffers
        stalls = alloc.stalls
        if op == "admit" and not live:
            need = size + memory.reservation_waste(size, alloc.delta)
            free = _slot_map(alloc)
            assert alloc.admit(seq, size, 64) == (max(_runs(free), default=0) >= need)
            assert alloc.stalls - stalls == (seq not in alloc._buffers) * _brute_force_stall(
                free, need
            )
        elif op == "grow" and live:
            start, span = alloc._buffers[seq]
            if alloc._lengths[seq] == 64:
                continue
            full = alloc._lengths[seq] == span
            after = _slot_map(alloc)[start + span : start + span + alloc.delta]
            in_place = len(after) == alloc.delta and all(after)
            without_own = _slot_map(alloc, skip=seq)  # relocation may reuse its own slots
            moved = max(_runs(without_own)) >= span + alloc.delta
            grew = alloc.grow(seq)
            assert grew == (not full or in_place or moved)
            stalled = not grew and _brute_force_stall(without_own, span + alloc.delta)
            assert alloc.stalls - stalls == stalled
        elif op == "release" and live:
            alloc.release(seq)
        assert _runs(_slot_map(alloc)) == alloc.heap.hole_sizes()


@given(st.lists(st.integers(1, 3000), min_size=1, max_size=20), st.sampled_from([32, 1024]))
def test_vattention_wastes_less_than_one_page_per_sequence(lengths, page_size):
    alloc = VAttentionAllocator(capacity=10**6, page_size=page_size)
    for seq, length in enumerate(lengths):
        assert alloc.admit(seq, 1, 8192)
        grow_to(alloc, seq, 1, length)
        unused = alloc.reserved_slots(seq) - length
        assert 0 <= unused < page_size
        assert unused == memory.paged_internal_waste(length, page_size)
    assert alloc.reserved == sum(alloc.reserved_slots(seq) for seq in range(len(lengths)))


def test_vattention_page_holds_tokens_of_one_layers_keys():
    shape = memory.PRESETS["llama-3-8b"]  # N_KV d_h b = 8 * 128 * 2 = 2,048 bytes a token
    assert page_tokens(shape, 2 * 2**20) == 1024
    assert page_tokens(shape, 64 * 2**10) == 32
    with pytest.raises(ValueError, match="whole number"):
        page_tokens(shape, 3000)


@pytest.mark.parametrize(
    "alloc",
    [
        StaticAllocator(100),
        OrcaAllocator(100, delta=16),
        VAttentionAllocator(100, page_size=10),
        PagedAllocator(6, block_size=16),
        OrcaReservationAllocator(100, "oracle"),
    ],
    ids=["static", "orca", "vattention", "paged", "orca-oracle"],
)
def test_a_refused_admission_changes_nothing_and_release_frees_everything(alloc):
    assert alloc.admit("a", 60, 100, final_len=90)
    reserved = alloc.reserved
    assert not alloc.admit("b", 60, 100, final_len=90)
    assert alloc.reserved == reserved
    alloc.release("a")
    assert alloc.reserved == 0


def test_paged_refusals_are_never_stalls():
    alloc = PagedAllocator(num_blocks=2, block_size=16)
    assert alloc.admit("a", 32, 64)
    assert not alloc.grow("a")  # the pool is full: a block is missing, not a contiguous hole
    assert not alloc.admit("b", 1, 64)
    assert alloc.stalls == 0


def test_paged_fork_shares_blocks_until_a_write_copies_the_partial_one():
    alloc = PagedAllocator(num_blocks=8, block_size=16)
    assert alloc.admit("parent", 20, 64)  # blocks 0 (full) and 1 (4 tokens)
    alloc.fork("parent", "child")
    assert alloc.reserved == 2 * 16
    assert alloc.grow("child")  # copy-on-write of the shared, partly filled block
    assert alloc.reserved == 3 * 16
    assert alloc.grow("parent")  # now its own: written in place
    assert alloc.reserved == 3 * 16


def test_heap_merges_a_freed_buffer_with_both_neighbouring_holes():
    heap = ContiguousHeap(30)
    starts = [heap.allocate(10) for _ in range(3)]
    assert starts == [0, 10, 20] and heap.hole_sizes() == []
    heap.release(0, 10)
    heap.release(20, 10)
    assert heap.hole_sizes() == [10, 10]
    heap.release(10, 10)
    assert heap.holes == [[0, 30]]


# -- the vLLM paper's Orca baselines -----------------------------------------------------------


def test_next_power_of_two_is_two_to_the_ceiling_of_the_log():
    assert [next_power_of_two(n) for n in (0, 1, 2, 3, 4, 5, 25, 64, 65)] == [
        0,
        1,
        2,
        4,
        4,
        8,
        32,
        64,
        128,
    ]


@given(prompt=st.integers(1, 4000), output=st.integers(1, 4000), extra=st.integers(0, 1000))
def test_orca_reservations_follow_the_vllm_papers_formulas(prompt, output, extra):
    final = prompt + output
    max_len = final + extra
    assert orca_reservation("max", prompt, max_len, final) == max_len
    assert orca_reservation("oracle", prompt, max_len, final) == final
    pow2 = orca_reservation("pow2", prompt, max_len, final)
    assert pow2 == min(max_len, prompt + 2 ** math.ceil(math.log2(output)))
    # Pow2 over-reserves the output by less than 2x, and never passes L_max.
    assert final <= pow2 <= min(max_len, prompt + 2 * output - 1)


def test_the_papers_pow2_example_reserves_32_slots_for_25_output_tokens():
    # vLLM paper §6.1: "if the true output length is 25, it reserves 32 positions for outputs"
    assert orca_reservation("pow2", 100, 2048, 125) == 100 + 32


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
def test_an_orca_baseline_holds_its_reservation_from_admission_to_release(policy):
    alloc = OrcaReservationAllocator(capacity=4096, policy=policy)
    assert alloc.admit("r", 100, 2048, final_len=125)
    size = orca_reservation(policy, 100, 2048, 125)
    assert alloc.reserved == alloc.reserved_slots("r") == size
    grow_to(alloc, "r", 100, 125)
    assert alloc.reserved_slots("r") == size, "the buffer never grows or moves"
    if policy == "oracle":
        with pytest.raises(ValueError, match="grew past the final_len"):
            alloc.grow("r")
    alloc.release("r")
    assert alloc.reserved == 0


def test_orca_baselines_stall_on_holes_as_contiguous_buffers_do():
    alloc = OrcaReservationAllocator(capacity=300, policy="oracle")
    for seq in "abc":
        assert alloc.admit(seq, 50, 200, final_len=100)
    alloc.release("a")
    alloc.release("c")  # 200 slots free, in holes of 100 each
    assert not alloc.admit("d", 50, 200, final_len=150)
    assert alloc.stalls == 1


def test_orca_baselines_refuse_bad_input_naming_it():
    with pytest.raises(ValueError, match="policy must be one of max, pow2, oracle, got 'avg'"):
        OrcaReservationAllocator(100, "avg")
    alloc = OrcaReservationAllocator(100, "pow2")
    with pytest.raises(ValueError, match="pass final_len"):
        alloc.admit("a", 10, 100)
    with pytest.raises(ValueError, match=r"final_len \(L_i\) 5 must lie between prompt_len 10"):
        alloc.admit("a", 10, 100, final_len=5)
    assert alloc.reserved == 0


def test_vattention_maps_physical_pages_under_a_virtual_range_on_demand():
    alloc = VAttentionAllocator(capacity=10 * 4, page_size=4)
    assert alloc.admit("a", 5, 32)  # 5 tokens: 2 pages mapped of a range of 8
    assert alloc.page_table("a") == (0, 1) and alloc.virtual_pages("a") == 8
    assert alloc.admit("b", 3, 32)
    grow_to(alloc, "a", 5, 9)  # token 8 starts page 2 of a's range: one more page is mapped
    assert alloc.page_table("a") == (0, 1, 3) and alloc.page_table("b") == (2,)
    assert alloc.reserved == 4 * 4
    alloc.release("a")  # its pages go back behind the never-used ones
    assert alloc.admit("c", 32, 32)  # 8 pages: any free ones, in any order
    assert alloc.page_table("c") == (4, 5, 6, 7, 8, 9, 0, 1)
    grow_to(alloc, "b", 3, 5)  # token 4 starts b's second page: the last free one, 3
    assert alloc.page_table("b") == (2, 3) and not alloc.grow("c")
