"""Bad scales given to ``minipaged.fp8`` directly: every public function that takes a scale
(or the largest magnitude a scale is made from) refuses 0, a negative, an infinite and a NaN
one by name, as a Python number or anywhere in a tensor, and a dtype that is no FP8 format.
The engine's writes check their scales once before quantizing (``check_kv_scales``); these are
the calls a student or a benchmark makes by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from minipaged import fp8
from minipaged.kv_cache import KVCache

E4M3 = torch.float8_e4m3fn
X = torch.linspace(-3, 3, 8)

SCALE_CALLS = {  # each takes one scale ``s``; a good one is 0.5
    "quantize": lambda s: fp8.quantize(X, s, E4M3),
    "error_bound": lambda s: fp8.error_bound(X, s, E4M3),
    "KVCache.set_scales k": lambda s: fp8_cache().set_scales(s, torch.ones(2, 2)),
    "KVCache.set_scales v": lambda s: fp8_cache().set_scales(torch.ones(2, 2), s),
}
NOT_A_SCALE = [0.0, -0.5, math.nan, math.inf, -math.inf]


def fp8_cache() -> KVCache:
    return KVCache(2, 4, 2, 4, 8, dtype=E4M3)


def as_tensor(call: str, value: float) -> torch.Tensor:
    """``value`` in the last place of a tensor whose other values are good, in the shape the
    call takes (the cache's scales are [num_layers, num_kv_heads])."""
    scale = torch.full((2, 2) if "KVCache" in call else (8,), 0.5)
    scale.view(-1)[-1] = value
    return scale


CASES = [  # the cache's scales are a tensor per layer and head, never a number
    (call, value, form)
    for call in SCALE_CALLS
    for value in NOT_A_SCALE
    for form in ("number", "tensor")
    if form == "tensor" or "KVCache" not in call
]


@pytest.mark.parametrize(("call", "value", "form"), CASES)
def test_a_scale_that_is_not_positive_and_finite_is_refused_naming_it(call, value, form):
    scale = value if form == "number" else as_tensor(call, value)
    with pytest.raises(ValueError, match=r"scale must be positive and finite.*got"):
        SCALE_CALLS[call](scale)


@pytest.mark.parametrize("call", ["quantize", "error_bound"])
@pytest.mark.parametrize("scale", ["0.5", True, None, [0.5]])
def test_a_scale_that_is_no_number_is_a_type_error_naming_it(call, scale):
    with pytest.raises(TypeError, match="scale must be a number or a floating-point"):
        SCALE_CALLS[call](scale)


@pytest.mark.parametrize("call", ["quantize", "error_bound"])
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
