"""Pools whose bookkeeping no memory holds, and pools of no name: ``BlockAllocator`` (and so
``BlockManager``, both pools, and an engine built on one) refuses them by name, before any
refcount or free-list entry is made. ``num_blocks=10**30`` raised ``OverflowError`` and
``10**10`` got the process killed for memory: 160 B of bookkeeping a block, 1.6 TB."""

from __future__ import annotations

import re

import numpy as np
import pytest

from minipaged import allocator
from minipaged.allocator import BOOKKEEPING_BYTES_PER_BLOCK, CHECKED_FROM_BLOCKS, BlockAllocator
from minipaged.block_manager import BlockManager
from minipaged.memory import check_fits, memory_amount
from minipaged.python_numbers import MAX_COUNT

MAKERS = {
    "BlockAllocator": lambda n: BlockAllocator(n),
    "BlockAllocator host": lambda n: BlockAllocator(n, pool="host"),
    "BlockManager device": lambda n: BlockManager(num_gpu_blocks=n),
    "BlockManager host": lambda n: BlockManager(num_gpu_blocks=4, num_cpu_blocks=n),
}


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("num_blocks", [MAX_COUNT, np.int64(MAX_COUNT)], ids=repr)
def test_a_pool_whose_bookkeeping_no_memory_holds_is_refused_naming_its_bytes(make, num_blocks):
    with pytest.raises(ValueError, match=r"num_blocks=[\d,]+ \((device|host) pool\): its ref"):
        MAKERS[make](num_blocks)  # 343 GB of refcounts and free list


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("num_blocks", [MAX_COUNT + 1, 10**30, np.int64(2**62)], ids=repr)
def test_a_pool_past_int32_block_ids_is_refused_naming_the_limit(make, num_blocks):
    with pytest.raises(ValueError, match=r"num_\w+ must be .*2,147,483,647, got"):
        MAKERS[make](num_blocks)


@pytest.mark.parametrize("make", MAKERS)
def test_the_check_counts_bookkeeping_bytes_against_the_host_memory_free_now(monkeypatch, make):
    need = CHECKED_FROM_BLOCKS * BOOKKEEPING_BYTES_PER_BLOCK
    monkeypatch.setattr(allocator, "free_memory", lambda: need - 1)
    with pytest.raises(ValueError, match="lower num_blocks") as refused:
        MAKERS[make](CHECKED_FROM_BLOCKS)
    assert "40.0 MiB of host memory" in str(refused.value)
    monkeypatch.setattr(allocator, "free_memory", lambda: need)
    MAKERS[make](CHECKED_FROM_BLOCKS)


@pytest.mark.parametrize("free", [999, 41_943_039, 16 * 10**9 - 1, 10**11])
def test_the_allocator_and_the_kv_cache_word_a_memory_amount_alike(monkeypatch, free):
    """Two refusals about one machine's memory say its free bytes in the same words, so a
    reader can compare them: the allocator's bookkeeping and ``memory.check_fits``."""
    monkeypatch.setattr(allocator, "free_memory", lambda: free)
    with pytest.raises(ValueError) as bookkeeping:
        BlockAllocator(max(CHECKED_FROM_BLOCKS, free // BOOKKEEPING_BYTES_PER_BLOCK + 1))
    with pytest.raises(ValueError) as kv_cache:
        check_fits(free + 1, free, "pools", "lower them", "")
    said = f"but {memory_amount(free)} are free"
    assert said in str(bookkeeping.value) and said in str(kv_cache.value)
    assert re.search(r"[\d.]+ ([GMK]iB|B) are free", said)


def test_an_unknown_free_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(allocator, "free_memory", lambda: None)
    assert BlockAllocator(CHECKED_FROM_BLOCKS).num_free == CHECKED_FROM_BLOCKS


@pytest.mark.parametrize("pool", ["gpu", "Device", "", None, 0, ["device"]], ids=repr)
def test_a_pool_of_no_known_name_is_refused_naming_the_names(pool):
    with pytest.raises(ValueError, match=r"pool must be one of \['device', 'host'\]"):
        BlockAllocator(4, pool=pool)
