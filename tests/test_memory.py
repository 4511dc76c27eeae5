"""The source text's §1–3 memory math: every number it gives, and the properties behind them."""

import re
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minipaged.memory import (
    PRESETS,
    ModelShape,
    block_offset,
    expected_paged_waste,
    expected_static_internal_waste,
    external_fragmentation_stalls,
    free_memory,
    logical_block,
    num_logical_blocks,
    paged_internal_waste,
    paged_waste_bound,
    paged_waste_fraction,
    reservation_waste,
    slot,
    static_internal_waste,
)

MB = 10**6  # the source text's MB and GB are decimal
GB = 10**9
LLAMA_3_8B = PRESETS["llama-3-8b"]
LLAMA_3_70B = PRESETS["llama-3-70b"]
LLAMA_2_70B = PRESETS["llama-2-70b"]

block_sizes = st.sampled_from([1, 2, 8, 16, 32])
lengths = st.integers(min_value=0, max_value=10_000)


# §1: KV bytes per token and per 8,192-token context.


def test_llama_3_8b_stores_131072_bytes_per_token():
    assert LLAMA_3_8B.kv_bytes_per_token == 131_072
    assert round(LLAMA_3_8B.kv_bytes_per_token / MB, 3) == 0.131


def test_llama_3_8b_8192_token_context_takes_1_07_gb():
    assert LLAMA_3_8B.kv_bytes(8192) == 1_073_741_824
    assert round(LLAMA_3_8B.kv_bytes(8192) / GB, 2) == 1.07


def test_llama_3_70b_stores_327680_bytes_per_token_and_2_68_gb_at_8192():
    assert LLAMA_3_70B.kv_bytes_per_token == 327_680
    assert round(LLAMA_3_70B.kv_bytes_per_token / MB, 3) == 0.328
    assert round(LLAMA_3_70B.kv_bytes(8192) / GB, 2) == 2.68


def test_llama_2_70b_as_stated_stores_2621440_bytes_per_token_and_21_47_gb_at_8192():
    assert LLAMA_2_70B.kv_bytes_per_token == 2_621_440
    assert round(LLAMA_2_70B.kv_bytes_per_token / MB, 2) == 2.62
    assert round(LLAMA_2_70B.kv_bytes(8192) / GB, 2) == 21.47


def test_llama_2_70b_with_its_real_8_kv_heads_matches_llama_3_70b():
    real = ModelShape(80, 64, 8, 128, 2)
    assert real.kv_bytes_per_token == LLAMA_3_70B.kv_bytes_per_token


def test_kv_bytes_is_linear_in_tokens():
    assert LLAMA_3_8B.kv_bytes(0) == 0
    assert LLAMA_3_8B.kv_bytes(3) == 3 * LLAMA_3_8B.kv_bytes(1)


# §3: block sizes.


def test_a_16_token_block_takes_65536_bytes_per_layer():
    assert LLAMA_3_70B.block_bytes_per_layer(16) == 65_536 == 64 * 1024


def test_an_80_layer_block_is_5_12_mb_only_in_units_of_1024000_bytes():
    assert LLAMA_3_70B.block_bytes(16) == 80 * 65_536 == 5_242_880
    assert Fraction(LLAMA_3_70B.block_bytes(16), 1000 * 1024) == Fraction("5.12")
    assert round(LLAMA_3_70B.block_bytes(16) / MB, 2) == 5.24
    assert LLAMA_3_70B.block_bytes(16) / 2**20 == 5.0


def test_num_blocks_for_counts_whole_blocks_in_a_budget():
    block = LLAMA_3_8B.block_bytes(16)
    assert LLAMA_3_8B.num_blocks_for(10 * block + block - 1, 16) == 10
    assert LLAMA_3_8B.num_blocks_for(0, 16) == 0


# §3 and §4: address translation.


def test_token_38_with_b_16_is_logical_block_2_offset_6():
    assert logical_block(38, 16) == 2
    assert block_offset(38, 16) == 6


def test_token_38_maps_to_slot_93_times_16_plus_6():
    table = [47, 12, 93]  # the §3 figure's physical blocks
    assert slot(table, 38, 16) == 93 * 16 + 6


def test_num_logical_blocks_rounds_up():
    assert num_logical_blocks(0, 16) == 0
    assert num_logical_blocks(16, 16) == 1
    assert num_logical_blocks(17, 16) == 2


def test_worked_example_address_is_base_plus_93_blocks_plus_6_tokens_for_one_head():
    one_head = ModelShape(1, 1, 1, 128, 2)  # one layer's key pool for one head: [blocks, B, d_h]
    block_bytes, token_bytes = 16 * 128 * 2, 128 * 2
    base = 0x7000_0000
    address = one_head.kv_address([47, 12, 93], 38, head=0, block_size=16, pool_ptr=base)
    assert address == base + 93 * block_bytes + 6 * token_bytes


def test_pool_strides_match_a_torch_pool_laid_out_blocks_heads_tokens_dims():
    shape = ModelShape(2, 4, 2, 8, 2)
    pool = torch.empty(5, shape.num_kv_heads, 4, shape.head_dim, dtype=torch.float16)
    strides = shape.kv_pool_strides(4)
    element_strides = tuple(s * pool.element_size() for s in pool.stride()[:3])
    assert (strides.block, strides.head, strides.token) == element_strides


def test_kv_address_points_at_the_vector_the_pool_holds_for_that_token_and_head():
    shape = ModelShape(1, 6, 3, 4, 4)  # b = 4: float32
    block_size, table = 4, [3, 0, 2]
    pool = torch.arange(5 * 3 * block_size * 4, dtype=torch.float32).reshape(5, 3, block_size, 4)
    flat = pool.flatten()
    for t in range(len(table) * block_size):
        for h in range(shape.num_kv_heads):
            element = shape.kv_address(table, t, h, block_size) // shape.dtype_bytes
            expected = pool[table[t // block_size], h, t % block_size]
            assert torch.equal(flat[element : element + shape.head_dim], expected)


@given(
    table=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=20),
    block_size=block_sizes,
    data=st.data(),
)
def test_slot_decomposes_back_into_physical_block_and_offset(table, block_size, data):
    t = data.draw(st.integers(min_value=0, max_value=len(table) * block_size - 1))
    s = slot(table, t, block_size)
    assert s // block_size == table[logical_block(t, block_size)]
    assert s % block_size == block_offset(t, block_size)


# §2: static, reservation and external waste.


def test_static_waste_is_the_unused_tail_of_the_max_length_buffer():
    assert static_internal_waste(200, 4096) == 3896
    assert LLAMA_3_8B.kv_bytes(static_internal_waste(200, 4096)) == 3896 * 131_072


def test_expected_static_waste_sums_over_a_length_distribution():
    dist = {1024: Fraction(1, 2), 2048: Fraction(1, 4), 4096: Fraction(1, 4)}
    assert expected_static_internal_waste(dist, 4096, num_requests=8) == 8 * (1536 + 512 + 0)


def test_expected_static_waste_from_samples_is_their_exact_mean():
    assert expected_static_internal_waste([0, 1, 1], 3, num_requests=3) == 3 + 2 + 2


def test_static_waste_exceeds_75_percent_for_the_enterprise_workload():
    # §2: prompts of 500 to 1,000 tokens plus 200 generated, in an 8,192-token window.
    samples = [prompt + 200 for prompt in range(500, 1001)]
    assert expected_static_internal_waste(samples, 8192) / 8192 > Fraction(3, 4)


def test_reservation_waste_is_the_unfilled_part_of_the_last_chunk():
    assert reservation_waste(1, 64) == 63
    assert reservation_waste(64, 64) == 0
    assert reservation_waste(65, 64) == 63


@given(t=st.integers(min_value=1, max_value=10_000), delta=st.integers(1, 512))
def test_reservation_waste_is_in_zero_to_delta(t, delta):
    assert 0 <= reservation_waste(t, delta) < delta


def test_stalls_when_total_free_fits_but_no_segment_does():
    assert external_fragmentation_stalls([30, 30, 40], 50)
    assert not external_fragmentation_stalls([30, 60], 50)  # one segment fits it
    assert not external_fragmentation_stalls([10, 20], 50)  # simply out of memory
    assert not external_fragmentation_stalls([], 1)


@given(
    segments=st.lists(st.integers(min_value=1, max_value=100), max_size=8),
    request=st.integers(min_value=1, max_value=500),
)
def test_stalls_predicate_matches_brute_force(segments, request):
    fits_somewhere = any(c >= request for c in segments)
    fits_in_total = sum(segments) >= request
    assert external_fragmentation_stalls(segments, request) == (
        fits_in_total and not fits_somewhere
    )


# §3: paged internal waste.


def test_expected_paged_waste_at_b_16_is_7_5_tokens():
    assert expected_paged_waste(16) == 7.5
    assert LLAMA_3_8B.kv_bytes(expected_paged_waste(16)) == 7.5 * 131_072


def test_expected_paged_waste_fraction_at_500_tokens_is_1_5_percent():
    assert paged_waste_fraction(500, 16) == Fraction(15, 1000)


def test_a_500_token_sequence_actually_wastes_12_tokens_not_the_expected_7_5():
    assert paged_internal_waste(500, 16) == 512 - 500 == 12


def test_paged_waste_is_bounded_by_b_minus_1():
    assert paged_waste_bound(16) == 15
    assert paged_internal_waste(17, 16) == 15
    assert paged_internal_waste(16, 16) == 0


@given(length=lengths, block_size=block_sizes)
def test_paged_waste_is_in_zero_to_b_minus_1_and_equals_minus_l_mod_b(length, block_size):
    waste = paged_internal_waste(length, block_size)
    assert 0 <= waste <= paged_waste_bound(block_size)
    assert waste == (-length) % block_size


@given(block_size=block_sizes, cycles=st.integers(1, 20), start=st.integers(0, 1000))
def test_mean_paged_waste_over_whole_cycles_of_b_is_exactly_b_minus_1_over_2(
    block_size, cycles, start
):
    span = range(start, start + cycles * block_size)
    mean = Fraction(sum(paged_internal_waste(L, block_size) for L in span), len(span))
    assert mean == expected_paged_waste(block_size)


@given(length=lengths, block_size=block_sizes, headroom=st.integers(0, 1000))
def test_static_waste_is_at_least_paged_waste_when_max_length_covers_the_blocks(
    length, block_size, headroom
):
    max_length = max(1, num_logical_blocks(length, block_size) * block_size + headroom)
    assert static_internal_waste(length, max_length) >= paged_internal_waste(length, block_size)


# Bad inputs.


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_layers": 0}, "num_layers must be a positive integer, got 0"),
        ({"head_dim": -128}, "head_dim must be a positive integer, got -128"),
        ({"dtype_bytes": 1.5}, "dtype_bytes must be a positive integer, got 1.5"),
        ({"num_kv_heads": True}, "num_kv_heads must be a positive integer, got True"),
        ({"num_q_heads": 12}, r"N_Q=12\) must be a multiple of num_kv_heads \(N_KV=8\)"),
    ],
)
def test_model_shape_rejects_bad_sizes(kwargs, message):
    sizes = {"num_layers": 32, "num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128}
    sizes["dtype_bytes"] = 2
    with pytest.raises(ValueError, match=message):
        ModelShape(**{**sizes, **kwargs})


def test_block_size_must_be_positive():
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        logical_block(3, 0)
    with pytest.raises(ValueError, match="block_size must be a positive integer, got -16"):
        LLAMA_3_8B.block_bytes(-16)


def test_token_position_must_be_non_negative():
    with pytest.raises(ValueError, match="t must be a non-negative integer, got -1"):
        block_offset(-1, 16)


def test_slot_rejects_a_position_past_the_block_table():
    with pytest.raises(ValueError, match=r"t=48 is outside the block table: 3 blocks of B=16"):
        slot([47, 12, 93], 48, 16)


def test_kv_address_rejects_a_head_past_the_kv_heads():
    with pytest.raises(ValueError, match=re.escape("head must be a KV head index in 0..7, got 8")):
        LLAMA_3_8B.kv_address([0], 0, head=8, block_size=16)


def test_static_waste_rejects_a_length_past_max_length():
    with pytest.raises(ValueError, match="length 5000 exceeds max_length 4096"):
        static_internal_waste(5000, 4096)


def test_expected_static_waste_rejects_probabilities_not_summing_to_1():
    with pytest.raises(ValueError, match=re.escape("probabilities must sum to 1, got 0.5")):
        expected_static_internal_waste({100: 0.5}, 4096)


def test_reservation_waste_rejects_step_0():
    with pytest.raises(ValueError, match="t must be a positive integer, got 0"):
        reservation_waste(0, 64)


def test_stalls_rejects_an_empty_segment():
    with pytest.raises(ValueError, match=r"free_segments\[1\] must be a positive integer, got 0"):
        external_fragmentation_stalls([10, 0], 5)


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="Linux's /proc/meminfo")
def test_free_memory_counts_the_file_cache_the_kernel_gives_back():
    """Memory a pool can have is MemAvailable, not the free pages alone: a machine whose file
    cache has filled its memory has few free pages and still room for the pool."""
    fields = dict(line.split(":") for line in Path("/proc/meminfo").read_text().splitlines())
    available, total = (
        int(fields[name].split()[0]) * 1024 for name in ("MemAvailable", "MemTotal")
    )
    assert 0 < free_memory() <= total
    assert abs(free_memory() - available) < 256 * 2**20  # read a moment apart
