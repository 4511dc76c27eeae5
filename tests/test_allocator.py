import pytest

from minipaged.allocator import BlockAllocator, OutOfBlocks
from minipaged.block_table import BlockTable


def test_new_pool_has_every_block_free():
    pool = BlockAllocator(4)
    assert pool.num_free == 4
    assert pool.refcounts() == (0, 0, 0, 0)


def test_allocate_sets_refcount_to_one():
    pool = BlockAllocator(4)
    block = pool.allocate()
    assert pool.refcount(block) == 1
    assert pool.num_free == 3


def test_decref_to_zero_returns_the_block_to_the_back_of_the_free_list():
    pool = BlockAllocator(3)
    first = pool.allocate()
    pool.decref(first)
    assert pool.free_blocks()[-1] == first
    assert pool.allocate() != first, "a freed block waits behind the blocks already free"


def test_shared_block_stays_allocated_until_its_last_holder_lets_go():
    pool = BlockAllocator(2)
    block = pool.allocate()
    assert pool.incref(block) == 2
    assert pool.decref(block) == 1
    assert block not in pool.free_blocks()
    assert pool.decref(block) == 0
    assert block in pool.free_blocks()


def test_full_pool_raises_out_of_blocks_naming_the_pool_size():
    pool = BlockAllocator(2)
    pool.allocate()
    pool.allocate()
    with pytest.raises(OutOfBlocks, match="all 2 blocks"):
        pool.allocate()


def test_double_free_is_refused_and_changes_nothing():
    pool = BlockAllocator(2)
    block = pool.allocate()
    pool.decref(block)
    before = (pool.refcounts(), pool.free_blocks())
    with pytest.raises(ValueError, match="double free"):
        pool.decref(block)
    assert (pool.refcounts(), pool.free_blocks()) == before


def test_sharing_a_free_block_is_refused():
    with pytest.raises(ValueError, match="free"):
        BlockAllocator(2).incref(0)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8"])
def test_pool_size_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="num_blocks must be a positive integer"):
        BlockAllocator(bad)


def test_out_of_range_block_id_is_refused():
    with pytest.raises(IndexError, match=r"0\.\.3"):
        BlockAllocator(4).refcount(4)


def test_block_table_reproduces_the_source_text_worked_example():
    # §3: t = 38, B = 16 -> j = 2, o = 6; T_r[2] = 93.
    table = BlockTable(block_size=16, blocks=[47, 12, 93], num_tokens=39)
    assert table.logical_block(38) == 2
    assert table.offset(38) == 6
    assert table.blocks[table.logical_block(38)] == 93
    assert table.slot(38) == 93 * 16 + 6


def test_block_table_reports_the_fill_of_its_last_block():
    assert BlockTable(16, [3, 5], 20).last_block_fill == 4
    assert BlockTable(16, [3, 5], 32).last_block_fill == 16
    assert BlockTable(16, [], 0).last_block_fill == 0


def test_block_table_refuses_a_position_past_its_blocks():
    with pytest.raises(ValueError, match=r"0\.\.31"):
        BlockTable(16, [3, 5], 20).slot(32)
