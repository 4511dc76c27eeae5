"""Scenario tests: the source text's §3, §5 and §6 protocols, one behaviour per test."""

import pytest

from minipaged import invariants
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import BlockManager
from minipaged.events import Alloc, CowCopy, Decref, Fork, Free, Incref, SwapIn, SwapOut


def test_allocating_then_freeing_returns_every_block():
    manager = BlockManager(num_gpu_blocks=8, block_size=4)
    manager.allocate(0, num_tokens=10)
    manager.allocate(1, num_tokens=4)
    assert manager.device.num_free == 8 - 3 - 1
    manager.free(0)
    manager.free(1)
    assert manager.device.num_free == 8
    invariants.assert_holds(manager)


def test_prompt_gets_ceil_of_length_over_block_size_blocks():
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    assert len(manager.allocate(0, num_tokens=33).blocks) == 3


def test_append_takes_a_new_block_only_when_the_last_one_is_full():
    manager = BlockManager(num_gpu_blocks=8, block_size=4)
    manager.allocate(0, num_tokens=3)
    assert manager.append_slot(0).cow is None  # token 3 fills block 0
    assert manager.device.num_free == 7
    result = manager.append_slot(0)  # token 4 starts logical block 1
    assert manager.device.num_free == 6
    assert result.slot == manager.table(0).blocks[1] * 4 + 0


def test_fork_shares_block_ids_and_allocates_nothing():
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    parent = manager.allocate(0, num_tokens=32)
    free_before = manager.device.num_free
    child = manager.fork(0, 1)
    assert child.blocks == parent.blocks
    assert child.blocks is not parent.blocks
    assert manager.device.num_free == free_before
    assert [manager.refcount(p) for p in parent.blocks] == [2, 2]


def test_forking_k_minus_one_children_raises_refcounts_by_k_minus_one():
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    table = manager.allocate(0, num_tokens=20)
    for child in range(1, 4):
        manager.fork(0, child)
    assert [manager.refcount(p) for p in table.blocks] == [4, 4]


def test_source_text_parallel_sampling_figure_allocates_one_new_block_per_branch():
    # §5 figure: a 32-token prompt, B = 16, two branches; token 33 of each branch starts a new
    # logical block, so no copy-on-write: each branch gets one private block (R = 1).
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    prompt_blocks = list(manager.allocate(0, num_tokens=32).blocks)
    manager.fork(0, 1)
    a, b = manager.append_slot(0), manager.append_slot(1)
    assert a.cow is None and b.cow is None
    assert [manager.refcount(p) for p in prompt_blocks] == [2, 2]
    new_a, new_b = manager.table(0).blocks[2], manager.table(1).blocks[2]
    assert new_a != new_b
    assert manager.refcount(new_a) == manager.refcount(new_b) == 1


def test_cow_copies_only_the_partly_filled_shared_block():
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    parent = manager.allocate(0, num_tokens=20)  # block 1 holds 4 of 16 tokens
    manager.fork(0, 1)
    shared_full, shared_partial = parent.blocks
    result = manager.append_slot(1)
    assert result.cow is not None
    src, dst = result.cow
    assert src == shared_partial
    child = manager.table(1)
    assert child.blocks == [shared_full, dst], "only index len // B = 1 changes"
    assert result.slot == dst * 16 + 4
    assert parent.blocks == [shared_full, shared_partial], "the other table is unchanged"
    assert manager.refcount(shared_full) == 2
    assert manager.refcount(shared_partial) == 1
    assert manager.refcount(dst) == 1


def test_cow_happens_once_then_the_copy_is_written_in_place():
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    manager.allocate(0, num_tokens=5)
    manager.fork(0, 1)
    assert manager.append_slot(1).cow is not None
    assert manager.append_slot(1).cow is None
    assert manager.append_slot(0).cow is None, "the parent is the last holder: R = 1 again"


def test_cow_event_narrates_who_shared_the_block():
    manager = BlockManager(num_gpu_blocks=8, block_size=16)
    manager.allocate(2, num_tokens=33)
    manager.fork(2, 3)
    manager.pop_events()
    manager.append_slot(3)
    cow, decref = manager.pop_events()
    assert isinstance(cow, CowCopy) and isinstance(decref, Decref)
    assert (cow.seq, cow.position, cow.logical_index, cow.num_tokens) == (3, 33, 2, 1)
    assert cow.shared_with == (2,)
    assert "shared with seq 2 (R=2)" in cow.narrate()
    assert decref.refcount == 1


def test_fork_and_free_emit_events_with_refcounts_after():
    manager = BlockManager(num_gpu_blocks=4, block_size=4)
    manager.allocate(0, num_tokens=5)
    manager.fork(0, 1)
    manager.free(0)
    manager.free(1)
    kinds = [(type(e), getattr(e, "refcount", None)) for e in manager.pop_events()]
    assert kinds == [
        (Alloc, None),
        (Alloc, None),
        (Fork, None),
        (Incref, 2),
        (Incref, 2),
        (Decref, 1),
        (Decref, 1),
        (Free, None),
        (Free, None),
    ]


def test_swap_out_then_in_moves_exactly_len_table_blocks_each_way():
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=8, block_size=4)
    table = manager.allocate(0, num_tokens=10)
    out = manager.swap_out([0])
    assert len(out) == 3
    assert table.pool == "host" and table.blocks == [h for _, h in out]
    assert manager.device.num_free == 8 and manager.host.num_free == 5
    back = manager.swap_in([0])
    assert len(back) == 3
    assert table.pool == "device" and table.blocks == [d for _, d in back]
    assert manager.host.num_free == 8
    invariants.assert_holds(manager)


def test_one_sequence_id_swaps_as_a_list_of_one_does():
    by_id, by_list = (BlockManager(8, 8, block_size=4) for _ in range(2))
    for manager in (by_id, by_list):
        manager.allocate(0, num_tokens=3)
        manager.allocate(1, num_tokens=10)
    assert by_id.can_swap_out(1) == by_list.can_swap_out([1]) is True
    assert by_id.swap_out(1) == by_list.swap_out([1])
    assert by_id.can_swap_in(1) == by_list.can_swap_in([1])
    assert by_id.swap_in(1) == by_list.swap_in([1])
    assert by_id.snapshot() == by_list.snapshot()
    with pytest.raises(ValueError, match="in device memory, not host memory"):
        by_id.swap_in(0)


def test_swapping_a_forked_group_copies_each_shared_block_once():
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=8, block_size=4)
    manager.allocate(0, num_tokens=8)
    manager.fork(0, 1)
    manager.append_slot(1)  # one private block for seq 1
    mapping = manager.swap_out([0, 1])
    assert len(mapping) == 3
    shared = manager.table(0).blocks
    assert [manager.refcount(h, "host") for h in shared] == [2, 2]
    events = [e for e in manager.pop_events() if isinstance(e, SwapOut)]
    assert [e.seq for e in events] == [0, 1]
    invariants.assert_holds(manager)


def test_swapping_out_one_sharer_leaves_the_other_on_the_device():
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=8, block_size=4)
    table = manager.allocate(0, num_tokens=8)
    manager.fork(0, 1)
    manager.swap_out([1])
    assert [manager.refcount(p) for p in table.blocks] == [1, 1]
    assert manager.table(1).pool == "host"
    invariants.assert_holds(manager)


def test_swap_in_without_room_is_refused_and_changes_nothing():
    manager = BlockManager(num_gpu_blocks=4, num_cpu_blocks=4, block_size=4)
    manager.allocate(0, num_tokens=12)
    manager.swap_out([0])
    manager.allocate(1, num_tokens=8)
    assert not manager.can_swap_in([0])
    before = manager.snapshot()
    with pytest.raises(OutOfBlocks, match="need 3 device blocks but only 2 are free"):
        manager.swap_in([0])
    assert manager.snapshot() == before
    assert not [e for e in manager.pop_events() if isinstance(e, SwapIn)]


def test_watermark_refuses_admission_that_would_leave_too_few_free_blocks():
    manager = BlockManager(num_gpu_blocks=100, block_size=1, watermark=0.1)
    assert manager.can_allocate(90)
    assert not manager.can_allocate(91)


def test_can_append_is_false_when_a_new_block_is_needed_and_none_is_free():
    manager = BlockManager(num_gpu_blocks=2, block_size=2)
    manager.allocate(0, num_tokens=3)
    manager.append_slot(0)  # fills block 1
    assert manager.device.num_free == 0
    assert not manager.can_append(0)
    with pytest.raises(OutOfBlocks, match="can_append"):
        manager.append_slot(0)


def test_can_append_counts_the_copy_a_shared_last_block_needs():
    manager = BlockManager(num_gpu_blocks=1, block_size=4)
    manager.allocate(0, num_tokens=2)
    manager.fork(0, 1)
    assert not manager.can_append(1), "writing into a shared block needs a free block to copy to"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_gpu_blocks": 4, "block_size": 0}, "block_size"),
        ({"num_gpu_blocks": 4, "block_size": -16}, "block_size"),
        ({"num_gpu_blocks": 0}, "num_gpu_blocks"),  # the argument, not the pool's field
        ({"num_gpu_blocks": 4, "watermark": 1.5}, "watermark"),
    ],
)
def test_bad_configuration_is_refused_with_the_value_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BlockManager(**kwargs)


def test_request_larger_than_the_whole_pool_is_refused_with_the_fix():
    manager = BlockManager(num_gpu_blocks=4, block_size=16)
    with pytest.raises(ValueError, match="more than the whole device pool of 4 blocks"):
        manager.allocate(0, num_tokens=65)
    assert manager.tables == {}


def test_unknown_sequence_is_refused():
    manager = BlockManager(num_gpu_blocks=4)
    with pytest.raises(KeyError, match="unknown sequence 7"):
        manager.append_slot(7)


def test_freeing_a_sequence_twice_is_refused():
    manager = BlockManager(num_gpu_blocks=4)
    manager.allocate(0, num_tokens=1)
    manager.free(0)
    with pytest.raises(KeyError, match="already freed"):
        manager.free(0)


def test_allocating_an_existing_sequence_is_refused_and_changes_nothing():
    manager = BlockManager(num_gpu_blocks=4)
    manager.allocate(0, num_tokens=1)
    before = manager.snapshot()
    with pytest.raises(ValueError, match="already has a block table"):
        manager.allocate(0, num_tokens=1)
    assert manager.snapshot() == before


def test_appending_to_a_swapped_out_sequence_is_refused():
    manager = BlockManager(num_gpu_blocks=4, num_cpu_blocks=4)
    manager.allocate(0, num_tokens=1)
    manager.swap_out([0])
    with pytest.raises(ValueError, match="swap it in first"):
        manager.append_slot(0)


def test_swap_out_without_a_host_pool_is_refused():
    manager = BlockManager(num_gpu_blocks=4)
    manager.allocate(0, num_tokens=1)
    assert not manager.can_swap_out([0])
    with pytest.raises(ValueError, match="num_cpu_blocks=0"):
        manager.swap_out([0])


def test_invariants_report_a_corrupted_refcount():
    manager = BlockManager(num_gpu_blocks=4, block_size=4)
    table = manager.allocate(0, num_tokens=4)
    manager.device.incref(table.blocks[0])  # a refcount no table accounts for
    problems = invariants.check(manager)["refcount conservation"]
    assert problems == [f"device block {table.blocks[0]}: R=2 but 1 table(s) hold it"]
    with pytest.raises(AssertionError, match="refcount conservation"):
        invariants.assert_holds(manager)


def test_invariants_report_a_table_with_the_wrong_length():
    manager = BlockManager(num_gpu_blocks=4, block_size=4)
    manager.allocate(0, num_tokens=4).num_tokens = 5
    assert invariants.check(manager)["M = ceil(L / B)"]
