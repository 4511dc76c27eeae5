"""The FP8 properties every implementation of the kernels must have, shared like
``tests/kernel_properties.py`` by the CUDA kernels (in the simulator) and their CPU twins, with
the same fixtures ``kernels`` and ``backend_name``.

The kernels read FP8 pools as bytes through a decode table and fold each KV head's scales into
its scores and output; the reference dequantizes after its gather. Both must give the same
attention, and the cache operations must move the same bytes."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_properties import TOLERANCE, Case, assert_kernels_generate_the_torch_tokens, cases

from minipaged import fp8
from minipaged.attention import paged_attention_decode, paged_attention_decode_loop
from minipaged.kv_cache import KVCache, quantize_kv, write_kv

formats = st.sampled_from(list(fp8.KV_CACHE_DTYPES.values()))


def quantized(case: Case, dtype: torch.dtype, seed: int) -> tuple[tuple, dict]:
    """``case``'s decode arguments with FP8 pools (NaN slots stay NaN: FP8 has NaN), and
    per-KV-head scales between 0.005 and 0.1, so the unit normal keys and values span most of
    the formats' range."""
    num_kv_heads = case.key_pool.shape[1]
    gen = torch.Generator().manual_seed(seed)
    k_scale, v_scale = torch.rand(2, num_kv_heads, generator=gen) * 0.095 + 0.005
    query, key_pool, value_pool, *rest = case.args
    key_pool = fp8.quantize(key_pool, k_scale.view(-1, 1, 1), dtype)
    value_pool = fp8.quantize(value_pool, v_scale.view(-1, 1, 1), dtype)
    return (query, key_pool, value_pool, *rest), {"k_scale": k_scale, "v_scale": v_scale}


@settings(max_examples=6, deadline=None)
@given(cases(), formats, st.integers(0, 2**16))
def test_v1_in_fp8_equals_the_loop_reference(kernels, case, dtype, seed):
    args, scales = quantized(case, dtype, seed)
    got = kernels.paged_attention_decode(*args, **scales)
    torch.testing.assert_close(got, paged_attention_decode_loop(*args, **scales), **TOLERANCE)


@settings(max_examples=4, deadline=None)
@given(cases(), formats, st.integers(0, 2**16))
def test_v2_in_fp8_equals_the_reference(kernels, case, dtype, seed):
    """Against the reference, as in fp32 (``kernel_properties``): the test above holds v1 to it."""
    args, scales = quantized(case, dtype, seed)
    got = kernels.paged_attention_decode_v2(*args, partition_size=case.block_size, **scales)
    torch.testing.assert_close(got, paged_attention_decode(*args, **scales), **TOLERANCE)


@settings(max_examples=6, deadline=None)
@given(formats, st.integers(0, 2**16), st.sampled_from([1, 2]))
def test_reshape_and_cache_writes_the_bytes_write_kv_quantizes(kernels, dtype, seed, heads):
    gen = torch.Generator().manual_seed(seed)
    key, value = torch.randn(2, 5, heads, 8, generator=gen) * 3
    k_scale, v_scale = torch.rand(2, heads, generator=gen) + 0.01
    slots = torch.tensor([0, 7, -1, 12, 3])
    pools = torch.zeros(2, 4, heads, 4, 8, dtype=dtype)  # 4 blocks of B = 4
    expected = pools.clone()
    key_bytes, value_bytes = quantize_kv(dtype, key, value, k_scale, v_scale)
    kernels.reshape_and_cache(key_bytes, value_bytes, pools[0], pools[1], slots)
    write_kv(*expected, key, value, slots, k_scale=k_scale, v_scale=v_scale)
    assert torch.equal(pools.view(torch.uint8), expected.view(torch.uint8))


def fp8_caches(kernels, dtype) -> tuple[KVCache, KVCache]:
    """Two equal FP8 caches with distinct bytes everywhere: the reference's and the kernels'."""
    made = []
    for kernel_module in (None, kernels):
        cache = KVCache(2, 6, 2, 4, 8, num_cpu_blocks=4, dtype=dtype, kernels=kernel_module)
        cache._key.view(torch.uint8).copy_(
            torch.arange(cache._key.numel()).view_as(cache._key) % 120
        )
        cache._value.view(torch.uint8).copy_(cache._key.view(torch.uint8).flip(0))
        made.append(cache)
    return made[0], made[1]


@settings(max_examples=6, deadline=None)
@given(formats, st.permutations(range(6)), st.permutations(range(4)))
def test_copies_and_swaps_move_the_same_fp8_bytes_as_the_reference(kernels, dtype, blocks, host):
    reference, cache = fp8_caches(kernels, dtype)
    for each in (reference, cache):
        each.copy_blocks([(blocks[0], blocks[1])])
        each.swap_out([(blocks[2], host[0]), (blocks[1], host[1])])
        each.swap_in([(host[0], blocks[3])])
    for got, want in zip(
        (cache._key, cache._value, cache._host_key, cache._host_value),
        (reference._key, reference._value, reference._host_key, reference._host_value),
        strict=True,
    ):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_engine_in_fp8_with_the_kernels_generates_the_torch_backends_tokens(backend_name, hf_llama):
    """Greedy decoding over an FP8 cache through the kernels (quantized writes, decode
    attention, copy-on-write copies and swaps) gives the reference path's FP8 tokens."""
    from minipaged.checkpoint import load_model
    from minipaged.kv_calibration import calibrate_kv_scales

    model = load_model(hf_llama[1])
    scales = calibrate_kv_scales(model, list(range(5, 30)), torch.float8_e4m3fn)
    assert_kernels_generate_the_torch_tokens(model, backend_name, torch.float8_e4m3fn, scales)
