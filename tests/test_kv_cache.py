"""The KV cache tensors: writes at slots, copy-on-write copies and swapping move exact bytes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minipaged.kv_cache import KVCache, write_kv


def filled_cache(num_cpu_blocks: int = 4) -> KVCache:
    """A 2-layer cache of 6 blocks whose every element is distinct, so any misplaced copy shows."""
    cache = KVCache(2, 6, num_kv_heads=2, block_size=4, head_dim=3, num_cpu_blocks=num_cpu_blocks)
    for layer in range(2):
        numel = cache.key[layer].numel()
        base = 2 * layer * numel
        cache.key[layer].copy_(torch.arange(base, base + numel).view_as(cache.key[layer]))
        cache.value[layer].copy_(-torch.arange(base, base + numel).view_as(cache.value[layer]))
    return cache


def snapshot(cache: KVCache) -> list[torch.Tensor]:
    return [t.clone() for t in cache.key + cache.value + cache.host_key + cache.host_value]


def assert_unchanged(cache: KVCache, before: list[torch.Tensor]) -> None:
    for now, then in zip(snapshot(cache), before, strict=True):
        assert torch.equal(now, then)


def test_pools_have_the_source_text_layout_in_every_layer():
    cache = KVCache(3, 10, num_kv_heads=2, block_size=16, head_dim=8, num_cpu_blocks=5)
    assert len(cache.key) == len(cache.value) == 3
    for pool in cache.key + cache.value:
        assert pool.shape == (10, 2, 16, 8)  # [num_blocks, num_kv_heads, B, head_dim]
    for pool in cache.host_key + cache.host_value:
        assert pool.shape == (5, 2, 16, 8)
        assert pool.device.type == "cpu"


def test_bytes_per_block_is_the_source_text_block_size_bytes():
    # §3: B = 16, N_KV = 8, d_h = 128, b = 2 gives 65,536 bytes per layer; 80 layers: 80 x 64 KB.
    one_layer = KVCache(1, 1, num_kv_heads=8, block_size=16, head_dim=128, dtype=torch.float16)
    assert one_layer.bytes_per_block == 65_536
    eighty = KVCache(80, 1, num_kv_heads=8, block_size=16, head_dim=128, dtype=torch.float16)
    assert eighty.bytes_per_block == 80 * 65_536
    assert eighty.bytes_per_block == sum(t.nbytes for t in eighty.key + eighty.value)


@pytest.mark.parametrize(
    "field", ["num_layers", "num_blocks", "num_kv_heads", "block_size", "head_dim"]
)
@pytest.mark.parametrize("bad", [0, -1, 2.0])
def test_rejects_a_size_that_is_not_a_positive_integer(field, bad):
    sizes = dict(num_layers=1, num_blocks=2, num_kv_heads=1, block_size=4, head_dim=8)
    sizes[field] = bad
    with pytest.raises(ValueError, match=f"{field} must be a positive integer, got {bad!r}"):
        KVCache(**sizes)


def test_rejects_a_negative_host_pool():
    with pytest.raises(ValueError, match="num_cpu_blocks must be a non-negative integer"):
        KVCache(1, 2, 1, 4, 8, num_cpu_blocks=-1)


def test_write_kv_puts_each_token_at_block_slot_div_b_offset_slot_mod_b():
    key_pool, value_pool = torch.zeros(3, 2, 4, 5), torch.zeros(3, 2, 4, 5)
    key = torch.randn(3, 2, 5)
    slots = torch.tensor([2 * 4 + 3, 0 * 4 + 1, 1 * 4 + 0])
    write_kv(key_pool, value_pool, key, 2 * key, slots)
    for i, (block, offset) in enumerate([(2, 3), (0, 1), (1, 0)]):
        assert torch.equal(key_pool[block, :, offset], key[i])
        assert torch.equal(value_pool[block, :, offset], 2 * key[i])
    assert key_pool.ne(0).any(dim=-1).sum() == 3 * 2  # three tokens x two heads, nothing else


def test_write_kv_skips_negative_slots():
    key_pool, value_pool = torch.zeros(2, 1, 4, 2), torch.zeros(2, 1, 4, 2)
    write_kv(
        key_pool, value_pool, torch.ones(3, 1, 2), torch.ones(3, 1, 2), torch.tensor([-1, 5, -1])
    )
    assert key_pool.sum() == 2 and key_pool[1, 0, 1].eq(1).all()
    assert value_pool.sum() == 2


def test_write_kv_rejects_a_slot_past_the_pool_without_writing():
    key_pool, value_pool = torch.zeros(2, 1, 4, 2), torch.zeros(2, 1, 4, 2)
    with pytest.raises(ValueError, match=r"slot 8 is past the end of the pool.*slots 0..7"):
        write_kv(
            key_pool, value_pool, torch.ones(2, 1, 2), torch.ones(2, 1, 2), torch.tensor([0, 8])
        )
    assert key_pool.eq(0).all() and value_pool.eq(0).all()


def test_write_kv_rejects_two_tokens_in_one_slot():
    key_pool, value_pool = torch.zeros(2, 1, 4, 2), torch.zeros(2, 1, 4, 2)
    with pytest.raises(ValueError, match="same slot"):
        write_kv(
            key_pool, value_pool, torch.ones(2, 1, 2), torch.ones(2, 1, 2), torch.tensor([3, 3])
        )


def test_write_kv_rejects_a_dtype_other_than_the_pools():
    key_pool, value_pool = torch.zeros(2, 1, 4, 2), torch.zeros(2, 1, 4, 2)
    key = torch.ones(1, 1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"key has dtype torch.float64 but the pools hold"):
        write_kv(key_pool, value_pool, key, key, torch.tensor([0]))


@given(st.data())
def test_every_written_token_reads_back_through_its_slot(data):
    num_blocks, block_size = 5, data.draw(st.sampled_from([1, 2, 4]))
    slots = data.draw(
        st.lists(st.integers(0, num_blocks * block_size - 1), unique=True, max_size=8)
    )
    key_pool, value_pool = (
        torch.zeros(num_blocks, 2, block_size, 3),
        torch.zeros(num_blocks, 2, block_size, 3),
    )
    key = torch.randn(len(slots), 2, 3)
    write_kv(key_pool, value_pool, key, -key, torch.tensor(slots, dtype=torch.int64))
    flat = key_pool.transpose(1, 2).reshape(num_blocks * block_size, 2, 3)  # [slots, heads, dim]
    for i, slot in enumerate(slots):
        assert torch.equal(flat[slot], key[i])


def test_copy_blocks_copies_each_pair_in_every_layer_and_nothing_else():
    cache = filled_cache()
    before = snapshot(cache)
    cache.copy_blocks([(1, 4), (3, 0)])
    for layer in range(2):
        for pools, old in ((cache.key, before[layer]), (cache.value, before[2 + layer])):
            assert torch.equal(pools[layer][4], old[1])
            assert torch.equal(pools[layer][0], old[3])
            untouched = [1, 2, 3, 5]
            assert torch.equal(pools[layer][untouched], old[untouched])


def test_copy_blocks_rejects_an_out_of_range_block_without_copying_any_pair():
    cache = filled_cache()
    before = snapshot(cache)
    with pytest.raises(ValueError, match=r"destination block 6 in pair \(2, 6\).*blocks 0..5"):
        cache.copy_blocks([(1, 4), (2, 6)])
    assert_unchanged(cache, before)


def test_copy_blocks_rejects_a_block_that_is_both_source_and_destination():
    cache = filled_cache()
    before = snapshot(cache)
    with pytest.raises(ValueError, match="both source and destination"):
        cache.copy_blocks([(1, 2), (2, 3)])
    assert_unchanged(cache, before)


def test_swap_out_then_in_restores_the_bytes_exactly_in_another_block():
    cache = filled_cache()
    before = snapshot(cache)
    cache.swap_out([(2, 3), (5, 0)])
    cache.key[0][2].zero_()  # the freed device block is reused by another sequence
    cache.swap_in([(3, 1), (0, 4)])
    for layer in range(2):
        for pools, old in ((cache.key, before[layer]), (cache.value, before[2 + layer])):
            assert torch.equal(pools[layer][1], old[2])
            assert torch.equal(pools[layer][4], old[5])


def test_swap_out_copies_into_the_host_block_in_every_layer():
    cache = filled_cache()
    cache.swap_out([(2, 3)])
    for layer in range(2):
        assert torch.equal(cache.host_key[layer][3], cache.key[layer][2])
        assert torch.equal(cache.host_value[layer][3], cache.value[layer][2])
        assert cache.host_key[layer][[0, 1, 2]].eq(0).all()


@pytest.mark.parametrize(
    ("direction", "mapping", "message"),
    [
        ("swap_out", [(0, 0), (1, 4)], r"destination block 4 .* not a host block"),
        ("swap_out", [(6, 0)], r"source block 6 .* not a device block"),
        ("swap_in", [(0, 1), (-1, 2)], r"source block -1 .* not a host block"),
        ("swap_in", [(0, 9)], r"destination block 9 .* not a device block"),
        ("swap_in", [(0, 1), (2, 1)], r"destination blocks \[1, 1\] repeat"),
    ],
)
def test_swap_rejects_bad_ids_and_leaves_every_pool_unchanged(direction, mapping, message):
    cache = filled_cache()
    before = snapshot(cache)
    with pytest.raises(ValueError, match=message):
        getattr(cache, direction)(mapping)
    assert_unchanged(cache, before)


def test_swap_out_without_a_host_pool_says_it_is_empty():
    cache = filled_cache(num_cpu_blocks=0)
    with pytest.raises(ValueError, match=r"no blocks \(num_cpu_blocks=0\)"):
        cache.swap_out([(0, 0)])
