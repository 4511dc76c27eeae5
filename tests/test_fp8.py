"""The FP8 KV cache: the formats' error bound, the cache that stores bytes and scales, the
reference attention that dequantizes, and ``LLM(kv_cache_dtype=...)``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_properties import make_case

from minipaged import LLM, attention, device, fp8, memory
from minipaged.config import EngineConfig
from minipaged.kv_cache import KVCache, write_kv
from minipaged.llm import check_kv_cache_fits
from minipaged.stats import RunStats
from minipaged.study.bench.memory import simulate_report

FORMATS = list(fp8.KV_CACHE_DTYPES.values())
formats = st.sampled_from(FORMATS)
# Magnitudes from far below FP8's subnormals to far past its largest value, both signs.
magnitudes = st.floats(-60, 60).map(lambda exponent: 2.0**exponent)
values = st.builds(lambda m, negative: -m if negative else m, magnitudes, st.booleans())
scales = st.floats(2.0**-20, 2.0**20)


@settings(max_examples=300, deadline=None)
@given(formats, st.lists(values, min_size=1, max_size=64), scales)
def test_quantize_then_dequantize_stays_within_the_formats_bound(dtype, xs, scale):
    x = torch.tensor(xs, dtype=torch.float32)
    s = torch.tensor(scale)
    error = (fp8.dequantize(fp8.quantize(x, s, dtype), s) - x).abs()
    assert bool((error <= fp8.error_bound(x, s, dtype)).all())


@pytest.mark.parametrize("dtype", FORMATS)
def test_the_bound_is_half_a_unit_in_the_last_place_and_is_reached(dtype):
    """Halfway between two neighbours, 1 and 1 + eps, rounding loses exactly the bound's
    eps / 2: a bound any tighter would be wrong, and truncation (a full eps) breaks it."""
    eps = torch.finfo(dtype).eps
    x = torch.tensor([1 + eps / 2 + eps / 8])  # just past halfway: rounds up to 1 + eps
    one = torch.tensor(1.0)
    error = (fp8.dequantize(fp8.quantize(x, one, dtype), one) - x).abs()
    assert math.isclose(float(error), 3 * eps / 8)
    assert float(fp8.error_bound(x, one, dtype)) >= float(error) > eps / 4


@pytest.mark.parametrize("dtype", FORMATS)
def test_quantize_clamps_instead_of_overflowing_to_inf(dtype):
    limit = torch.finfo(dtype).max
    x = torch.tensor([1e30, -1e30, 2 * limit])
    assert fp8.quantize(x, torch.tensor(1.0), dtype).float().tolist() == [limit, -limit, limit]


def test_scale_for_gives_the_largest_value_headroom_and_a_silent_head_scale_one():
    amax = torch.tensor([448.0 / 2, 0.0])
    assert fp8.scale_for(amax, torch.float8_e4m3fn).tolist() == [1.0, 1.0]


def test_cache_dtype_names_the_accepted_values():
    assert fp8.cache_dtype("auto", torch.float16) is torch.float16
    assert fp8.cache_dtype("fp8_e5m2", torch.float32) is torch.float8_e5m2
    with pytest.raises(ValueError, match=r"'auto' or one of \['fp8_e4m3', 'fp8_e5m2'\].*'fp8'"):
        fp8.cache_dtype("fp8", torch.float32)


def fp8_cache(dtype=torch.float8_e4m3fn, num_cpu_blocks=4) -> KVCache:
    cache = KVCache(2, 6, 2, 4, 8, num_cpu_blocks=num_cpu_blocks, dtype=dtype)
    cache.set_scales(torch.tensor([[0.01, 0.02], [0.03, 0.04]]), torch.full((2, 2), 0.005))
    return cache


def test_an_fp8_block_takes_a_quarter_of_float32_bytes():
    float_cache = KVCache(2, 6, 2, 4, 8)
    assert fp8_cache().bytes_per_block * 4 == float_cache.bytes_per_block
    assert fp8_cache().host_key[0].dtype == torch.float8_e4m3fn  # the host pool too


@pytest.mark.parametrize("dtype", FORMATS)
def test_a_write_quantizes_with_each_kv_heads_scale(dtype):
    cache = fp8_cache(dtype)
    key = torch.randn(3, 2, 8)  # [N, N_KV, d_h]
    value = torch.randn(3, 2, 8)
    slots = torch.tensor([0, 5, 13])
    k_scale, v_scale = cache.k_scale[1], cache.v_scale[1]
    write_kv(cache.key[1], cache.value[1], key, value, slots, k_scale=k_scale, v_scale=v_scale)
    stored = cache.key[1][slots // 4, :, slots % 4]  # [N, N_KV, d_h] bytes
    scale = k_scale[:, None]
    assert torch.equal(stored, fp8.quantize(key, scale, dtype))
    error = (fp8.dequantize(stored, scale) - key).abs()
    assert bool((error <= fp8.error_bound(key, scale, dtype)).all())


def test_copy_and_swap_move_fp8_bytes_and_leave_the_scales():
    cache = fp8_cache()
    bytes_ = torch.randint(0, 120, cache._key.shape, dtype=torch.uint8)  # finite e4m3 bytes
    cache._key.view(torch.uint8).copy_(bytes_)
    cache._value.view(torch.uint8).copy_(bytes_.flip(0))
    scales = (cache.k_scale.clone(), cache.v_scale.clone())
    before = (cache._key.clone(), cache._value.clone())
    cache.copy_blocks([(0, 5)])
    assert torch.equal(cache._key[:, 5].view(torch.uint8), before[0][:, 0].view(torch.uint8))
    cache.swap_out([(1, 2)])
    cache._key[:, 1] = 0
    cache._value[:, 1] = 0
    cache.swap_in([(2, 1)])
    for pool, then in zip((cache._key, cache._value), before, strict=True):
        assert torch.equal(pool[:, 1].view(torch.uint8), then[:, 1].view(torch.uint8))
    assert torch.equal(cache.k_scale, scales[0]) and torch.equal(cache.v_scale, scales[1])


def test_set_scales_rejects_a_wrong_shape_or_a_zero():
    cache = fp8_cache()
    with pytest.raises(ValueError, match=r"k_scale must be positive with shape .*\[2, 2\]"):
        cache.set_scales(torch.ones(2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="v_scale must be positive"):
        cache.set_scales(torch.ones(2, 2), torch.zeros(2, 2))


@settings(max_examples=15, deadline=None)
@given(formats, st.integers(0, 2**16), st.sampled_from([4, 8]), st.sampled_from([1, 2]))
def test_every_reference_path_reads_fp8_as_its_dequantized_values(dtype, seed, block_size, group):
    """The loop, the vectorized decode, the partitioned decode and prefill over FP8 pools all
    equal the vectorized decode over float pools holding the dequantized values."""
    case = make_case(seed, [3 * block_size - 1, 5], 2 * group, 2, 8, block_size)
    gen = torch.Generator().manual_seed(seed)
    k_scale, v_scale = torch.rand(2, 2, generator=gen) * 0.1 + 0.005
    quantized = [
        fp8.quantize(pool, s.view(-1, 1, 1), dtype)
        for pool, s in ((case.key_pool, k_scale), (case.value_pool, v_scale))
    ]
    query, _, _, tables, lens, scale, _ = case.args
    fp8_args = (query, *quantized, tables, lens, scale, block_size)
    dequantized = [
        fp8.dequantize(q, s.view(-1, 1, 1))
        for q, s in zip(quantized, (k_scale, v_scale), strict=True)
    ]
    want = attention.paged_attention_decode(query, *dequantized, tables, lens, scale, block_size)
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    paths = [
        attention.paged_attention_decode(*fp8_args, **scales),
        attention.paged_attention_decode_loop(*fp8_args, **scales),
        attention.paged_attention_decode_partitioned(*fp8_args, 2 * block_size, **scales),
        attention.paged_attention_prefill(
            query,
            *quantized,
            tables,
            lens,
            torch.ones(2, dtype=torch.int32),
            scale,
            block_size,
            **scales,
        ),
    ]
    for got in paths:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["fp8", "float16", "int8"])
def test_llm_rejects_a_kv_cache_dtype_it_does_not_know_and_says_what_to_use(name):
    with pytest.raises(ValueError, match="kv_cache_dtype") as error:
        LLM("tiny", kv_cache_dtype=name)
    assert repr(name) in str(error.value) and "'auto'" in str(error.value)


def test_llm_with_fp8_holds_four_times_the_float32_blocks_and_calibrated_scales():
    fp32, e4m3 = LLM("tiny"), LLM("tiny", kv_cache_dtype="fp8_e4m3")
    assert e4m3.engine.kv_cache.num_blocks == 4 * fp32.engine.kv_cache.num_blocks
    assert e4m3.engine.kv_cache.dtype == torch.float8_e4m3fn
    again = LLM("tiny", kv_cache_dtype="fp8_e4m3").engine.kv_cache
    assert torch.equal(again.k_scale, e4m3.engine.kv_cache.k_scale)  # deterministic
    assert bool((e4m3.engine.kv_cache.k_scale != 1).all())  # calibrated, not vLLM's default 1


def test_with_kv_dtype_sets_b_and_fp8_fits_twice_the_blocks_of_bf16():
    llama = memory.PRESETS["llama-3-8b"]
    fp8_shape = llama.with_kv_dtype("fp8_e4m3")
    assert (llama.dtype_bytes, fp8_shape.dtype_bytes) == (2, 1)
    assert fp8_shape.block_bytes(16) * 2 == llama.block_bytes(16)
    assert fp8_shape.num_blocks_for(2**30, 16) == 2 * llama.num_blocks_for(2**30, 16)
    assert llama.with_kv_dtype("auto") is llama
    with pytest.raises(ValueError, match=r"kv_cache_dtype must be 'auto' or one of .*'int4'"):
        llama.with_kv_dtype("int4")


def test_paged_fp8_row_runs_at_least_as_many_sequences_in_the_same_bytes():
    report = simulate_report(hbm_gb=20, num_requests=60, fp8_paged=True, show_progress=False)
    rows = {row["allocator"]: row for row in report.rows}
    assert rows["paged B=16 FP8"]["peak_seqs"] > rows["paged B=16"]["peak_seqs"]
    assert rows["paged B=16 FP8"]["preemptions"] < rows["paged B=16"]["preemptions"]


def test_generates_memory_table_names_the_kv_dtype_blocks_and_bytes():
    cache = fp8_cache()
    stats = RunStats(kv_cache=cache.describe())
    assert ("KV cache", "float8_e4m3fn (b = 1): 6 blocks × 256 B = 1.5 KiB, host 4 blocks") in (
        stats.rows()
    )


def test_the_free_memory_check_counts_one_byte_per_fp8_element(monkeypatch):
    pools = EngineConfig(num_gpu_blocks=100, num_cpu_blocks=0)
    need_fp32 = 100 * LLM("tiny").engine.kv_cache.bytes_per_block
    monkeypatch.setattr(device, "free_memory", lambda: need_fp32 - 1)
    with pytest.raises(ValueError, match="the KV cache would take"):
        check_kv_cache_fits(pools)
    monkeypatch.setattr(device, "free_memory", lambda: need_fp32 // 4)
    check_kv_cache_fits(pools.replace(kv_cache_dtype="fp8_e4m3"))
