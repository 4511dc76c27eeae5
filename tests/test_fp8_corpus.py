"""Bad scales given by hand: every public function that takes a scale (``minipaged.fp8``'s,
``KVCache.set_scales``, a cache write's and every attention entry point's ``k_scale`` /
``v_scale``), or the largest magnitude a scale is made from, refuses 0, a negative, an infinite
and a NaN one by name in the one rule's words (``fp8.check_scales``), as a Python number or
anywhere in a tensor, and a dtype that is no FP8 format; so is a scale float32 (where scales
are kept) cannot hold, a float64 per-head scale, and one on another device than the pools.
The engine reads none of its own scales back (``attention_call.engine_attention``): it
checked them once, at ``KVCache.set_scales``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import cuda_kernels.cpu
from minipaged import attention, fp8
from minipaged.kv_cache import KVCache, write_kv

E4M3 = torch.float8_e4m3fn
X = torch.linspace(-3, 3, 8)
KEYS = torch.ones(1, 2, 8)  # [N, N_KV, head_dim]: one token of the cache below
SLOT = torch.tensor([0])


def attend(decode, s: torch.Tensor, name: str) -> torch.Tensor:
    """``decode`` over one token of ``fp8_cache``'s first layer, ``s`` as ``name``."""
    cache, ones = fp8_cache(), torch.ones(2)
    scales = {"k_scale": ones, "v_scale": ones} | {name: s}
    tables, lens = torch.tensor([[0]], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    query = torch.ones(1, 2, 8)
    return decode(query, cache.key[0], cache.value[0], tables, lens, 0.35, 4, **scales)


SCALE_CALLS = {  # each takes one scale ``s``; a good one is 0.5
    "quantize": lambda s: fp8.quantize(X, s, E4M3),
    "dequantize": lambda s: fp8.dequantize(fp8.quantize(X, 0.5, E4M3), s),
    "error_bound": lambda s: fp8.error_bound(X, s, E4M3),
    "KVCache.set_scales k_scale": lambda s: fp8_cache().set_scales(s, torch.ones(2, 2)),
    "KVCache.set_scales v_scale": lambda s: fp8_cache().set_scales(torch.ones(2, 2), s),
    "write_kv k_scale": lambda s: write_kv(*pools(), KEYS, KEYS, SLOT, k_scale=s),
    "write_kv v_scale": lambda s: write_kv(*pools(), KEYS, KEYS, SLOT, v_scale=s),
    "attention k_scale": lambda s: attend(attention.paged_attention_decode, s, "k_scale"),
    "attention v_scale": lambda s: attend(attention.paged_attention_decode, s, "v_scale"),
    "CPU twin k_scale": lambda s: attend(cuda_kernels.cpu.paged_attention_decode, s, "k_scale"),
}
PER_HEAD = ("write_kv", "attention", "CPU twin")  # [num_kv_heads] tensors, never a number
NOT_A_SCALE = [0.0, -0.5, math.nan, math.inf, -math.inf]


def fp8_cache() -> KVCache:
    return KVCache(2, 4, 2, 4, 8, dtype=E4M3)


def pools() -> tuple[torch.Tensor, torch.Tensor]:
    cache = fp8_cache()
    return cache.key[0], cache.value[0]


def as_tensor(call: str, value: float) -> torch.Tensor:
    """``value`` in the last place of a tensor whose other values are good, in the shape the
    call takes (the cache's scales are [num_layers, num_kv_heads], a call's [num_kv_heads])."""
    shape = (2, 2) if "KVCache" in call else (2,) if call.startswith(PER_HEAD) else (8,)
    scale = torch.full(shape, 0.5)
    scale.view(-1)[-1] = value
    return scale


CASES = [  # the cache's scales are a tensor per layer and head, never a number
    (call, value, form)
    for call in SCALE_CALLS
    for value in NOT_A_SCALE
    for form in ("number", "tensor")
    if form == "tensor" or not call.startswith(("KVCache", *PER_HEAD))
]


@pytest.mark.parametrize(("call", "value", "form"), CASES)
def test_a_scale_that_is_not_positive_and_finite_is_refused_naming_it(call, value, form):
    """One rule, one wording: every path's refusal is ``fp8.check_scales``'s."""
    scale = value if form == "number" else as_tensor(call, value)
    name = call.split()[-1] if call.split()[-1].endswith("_scale") else "scale"
    with pytest.raises(ValueError) as refusal:
        SCALE_CALLS[call](scale)
    assert str(refusal.value).startswith(f"{name} must be positive and finite (a head's largest")
    assert str(refusal.value).endswith(f"got {value}")


PAST_FLOAT32 = [1e300, 3.5e38, 1e-300, 2.0**-151]
"""Positive and finite as Python floats, but 0 or inf once kept in float32, where scales are:
a float64 1e300 was taken by ``KVCache.set_scales`` and stored as inf."""

RANGE_CASES = [
    (call, value, form)
    for call in SCALE_CALLS
    for value in PAST_FLOAT32
    for form in ("number", "float64 tensor")
    if (form == "number" and not call.startswith(("KVCache", *PER_HEAD)))
    or (form != "number" and not call.startswith(PER_HEAD))  # float64 per head: see below
]


@pytest.mark.parametrize(("call", "value", "form"), RANGE_CASES)
def test_a_scale_float32_cannot_hold_is_refused_naming_the_range(call, value, form):
    scale = value if form == "number" else as_tensor(call, 0.5).double()
    if form != "number":
        scale.view(-1)[-1] = value
    with pytest.raises(ValueError, match=r"must be positive and finite .* in float32, where "):
        SCALE_CALLS[call](scale)


@pytest.mark.parametrize("value", [2.0**-149, torch.finfo(torch.float32).max, 1e-30, 1e30])
@pytest.mark.parametrize("call", ["quantize", "dequantize", "error_bound"])
def test_a_scale_float32_holds_is_taken_however_small_or_large(call, value):
    SCALE_CALLS[call](value)


@pytest.mark.parametrize("call", [c for c in SCALE_CALLS if c.startswith(PER_HEAD)])
def test_a_float64_per_head_scale_is_refused_before_torch_mixes_dtypes(call):
    """torch refused the mix from deep inside the reference ("Expected query, key, and value
    to have the same dtype"); the refusal now names the scale and the cast."""
    name = call.split()[-1]
    with pytest.raises(TypeError, match=rf"{name} is float64, .* pass {name}.float\(\)"):
        SCALE_CALLS[call](torch.full((2,), 0.5, dtype=torch.float64))


@pytest.mark.parametrize("call", SCALE_CALLS)
def test_a_scale_on_another_device_is_refused_naming_both_devices(call):
    """The meta device stands in for another device here (a CPU-only machine has no other):
    a per-head scale must sit with the pools, and nothing reads values off the meta device
    (it was a NotImplementedError from inside torch)."""
    shape = (2, 2) if "KVCache" in call else (2,) if call.startswith(PER_HEAD) else (8,)
    with pytest.raises(ValueError, match=r"meta"):
        SCALE_CALLS[call](torch.full(shape, 0.5, device="meta"))


NO_NUMBERS = [  # dequantize takes None: a pool with no scale (the model's dtype, or 1)
    (call, scale)
    for call in ("quantize", "dequantize", "error_bound")
    for scale in ("0.5", True, None, [0.5])
    if not (call == "dequantize" and scale is None)
]


@pytest.mark.parametrize(("call", "scale"), NO_NUMBERS)
def test_a_scale_that_is_no_number_is_a_type_error_naming_it(call, scale):
    with pytest.raises(TypeError, match="scale must be a number or a floating-point"):
        SCALE_CALLS[call](scale)


@pytest.mark.parametrize("call", ["quantize", "dequantize", "error_bound"])
@pytest.mark.parametrize("scale", [0.5, np.float32(0.5), np.float64(0.5), torch.tensor(0.5)])
def test_a_good_scale_is_taken_in_every_form_the_one_rule_allows(call, scale):
    assert torch.equal(SCALE_CALLS[call](scale), SCALE_CALLS[call](torch.full((8,), 0.5)))


@pytest.mark.parametrize("amax", [-1.0, math.nan, math.inf, torch.tensor([2.0, math.nan])])
def test_scale_for_refuses_a_largest_magnitude_no_values_have(amax):
    with pytest.raises(ValueError, match="amax must be non-negative and finite"):
        fp8.scale_for(amax, E4M3)


def test_scale_for_takes_a_number_and_gives_a_zero_head_a_scale_of_one():
    assert fp8.scale_for(0.0, E4M3).item() == 1.0
    assert fp8.scale_for(224.0, E4M3).item() == 1.0  # 224 * headroom 2 / 448


FUNCTIONS_OF_A_DTYPE = {
    "quantize": lambda dtype: fp8.quantize(X, 0.5, dtype),
    "error_bound": lambda dtype: fp8.error_bound(X, 0.5, dtype),
    "scale_for": lambda dtype: fp8.scale_for(1.0, dtype),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int8, "fp8_e4m3"])
@pytest.mark.parametrize("call", FUNCTIONS_OF_A_DTYPE)
def test_a_dtype_that_is_no_fp8_format_is_refused_naming_the_formats(call, dtype):
    with pytest.raises(ValueError, match=r"dtype must be an FP8 format.*fp8_e4m3"):
        FUNCTIONS_OF_A_DTYPE[call](dtype)


@pytest.mark.parametrize("call", ["quantize", "dequantize", "error_bound"])
@pytest.mark.parametrize("x", [[0.5, 1.0], 0.5, np.ones(3, dtype=np.float32), None])
def test_values_that_are_no_tensor_are_a_type_error_naming_x(call, x):
    take = {
        "quantize": lambda: fp8.quantize(x, 0.5, E4M3),
        "dequantize": lambda: fp8.dequantize(x, 0.5),
        "error_bound": lambda: fp8.error_bound(x, 0.5, E4M3),
    }
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got .*torch.tensor\("):
        take[call]()


def test_dequantize_without_a_scale_still_returns_a_model_dtype_pool_as_it_is():
    pool = torch.ones(2, 3)
    assert fp8.dequantize(pool, None) is pool


DRAFT = {"method": "draft", "draft_model": "tiny-draft"}  # drafts every step: a verify pass


@pytest.mark.parametrize("speculative", [None, DRAFT], ids=["plain", "speculative"])
def test_an_engine_step_reads_no_scale_back_and_a_direct_call_reads_each_once(
    monkeypatch, speculative
):
    """On a GPU each read of a scale's values is a host sync: the engine's steps (prefill,
    decode, speculative verify; FP8 writes and reads in every layer) read none, since
    ``KVCache.set_scales`` checked them; a direct attention call reads each of its two scales
    once, however many blocks it reads."""
    from minipaged import LLM, SamplingParams, attention_call

    reads = []
    checked = attention_call.check_scale_values
    monkeypatch.setattr(
        attention_call,
        "check_scale_values",
        lambda values, name: reads.append(name) or checked(values, name),
    )
    llm = LLM("tiny", kv_cache_dtype="fp8_e4m3", num_gpu_blocks=32, speculative=speculative)
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    outputs = llm.generate(["It is a truth", "Mr. Darcy"], params)
    assert [len(out.outputs[0].token_ids) for out in outputs] == [6, 6]
    assert reads == []
    assert speculative is None or llm.engine.speculator.num_verify_passes > 0
    attend(attention.paged_attention_decode, torch.ones(2), "k_scale")
    assert reads == ["k_scale", "v_scale"]


HALF_READS = {  # each reads 16-bit pools under a float32 query, its scales given by keyword
    "decode": lambda q, k, v, t, lens, **s: attention.paged_attention_decode(
        q, k, v, t, lens, 0.35, 4, **s
    ),
    "decode_loop": lambda q, k, v, t, lens, **s: attention.paged_attention_decode_loop(
        q, k, v, t, lens, 0.35, 4, **s
    ),
    "decode_partitioned": lambda q, k, v, t, lens, **s: (
        attention.paged_attention_decode_partitioned(q, k, v, t, lens, 0.35, 4, 4, **s)
    ),
    "prefill": lambda q, k, v, t, lens, **s: attention.paged_attention_prefill(
        q, k, v, t, lens, torch.ones_like(lens), 0.35, 4, **s
    ),
}


@pytest.mark.parametrize("given", ["none", "k_scale", "v_scale"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("call", HALF_READS)
def test_a_16_bit_pool_without_its_scales_is_read_widened_with_a_scale_of_1(call, dtype, given):
    """A 16-bit pool under a float32 query stores k / s; a scale not given is 1, and the pool
    is read in float32 as given. Without scales it failed inside torch ("Expected query, key,
    and value to have the same dtype")."""
    torch.manual_seed(0)
    query, keys, values = torch.randn(2, 4, 8), torch.randn(4, 2, 4, 8), torch.randn(4, 2, 4, 8)
    tables, lens = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), torch.tensor([6, 5])
    half = keys.to(dtype), values.to(dtype)
    scales = {} if given == "none" else {given: torch.full((2,), 2.0)}
    got = HALF_READS[call](query, *half, tables, lens, **scales)
    widened = [pool.float() for pool in half]
    if given != "none":
        widened[given == "v_scale"] *= 2.0
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, HALF_READS[call](query, *widened, tables, lens))
