"""Values that are no finite number, on their way into an FP8 KV cache. ``fp8.quantize`` took
NaN and inf without a word, and nothing said what became of them. The result is now defined,
documented and held here, position by position: NaN is stored as the format's NaN and read back
as NaN (so a slot poisoned with NaN stays poisoned), $\\pm\\infty$ is clamped to $\\pm\\max$ like
any value past the range, and ``error_bound`` says what that costs (infinite, or NaN), while
every finite neighbour is stored as it would be alone. The one thing that must never be NaN is
a scale, which every value of its head is read by: a model whose keys or values come out NaN
or infinite is refused at calibration, naming the layer and head, before any scale is set."""

from __future__ import annotations

import math

import pytest
import torch

from minipaged import fp8
from minipaged.kv_cache import KVCache
from minipaged.kv_calibration import calibrate_kv_scales
from tests.test_speculative import small_llama

FORMATS = list(fp8.KV_CACHE_DTYPES.values())
NON_FINITE = [math.nan, math.inf, -math.inf]


def with_at(position: int, value: float) -> torch.Tensor:
    """Eight finite values of both signs, ``value`` at ``position``."""
    x = torch.linspace(-3, 3, 8)
    x[position] = value
    return x


@pytest.mark.parametrize("dtype", FORMATS)
@pytest.mark.parametrize("value", NON_FINITE)
@pytest.mark.parametrize("position", [0, 5])
def test_a_non_finite_value_has_its_defined_result_and_leaves_its_neighbours_alone(
    dtype, value, position
):
    scale = 0.5
    x = with_at(position, value)
    stored = fp8.quantize(x, scale, dtype)
    back = fp8.dequantize(stored, scale)
    limit = torch.finfo(dtype).max
    if math.isnan(value):
        assert math.isnan(back[position])
    else:
        assert back[position] == math.copysign(scale * limit, value)
    others = [i for i in range(8) if i != position]
    alone = fp8.quantize(torch.linspace(-3, 3, 8), scale, dtype)
    assert torch.equal(stored.view(torch.uint8)[others], alone.view(torch.uint8)[others])
    assert torch.isfinite(back[others]).all()


@pytest.mark.parametrize("dtype", FORMATS)
def test_the_error_bound_of_a_non_finite_value_says_what_it_costs(dtype):
    bound = fp8.error_bound(torch.tensor([math.nan, math.inf, -math.inf, 1.0]), 0.5, dtype)
    assert math.isnan(bound[0]) and bound[1] == bound[2] == math.inf
    assert math.isfinite(bound[3])


def test_the_stored_nan_is_the_formats_own_not_a_clamped_number():
    """e4m3fn has no infinity: its NaN is the bit pattern 0x7F (or 0xFF); e5m2 keeps IEEE's."""
    stored = fp8.quantize(torch.tensor([math.nan]), 1.0, torch.float8_e4m3fn)
    assert stored.view(torch.uint8).item() & 0x7F == 0x7F


@pytest.mark.parametrize("what", ["keys", "values"])
@pytest.mark.parametrize("value", NON_FINITE)
def test_calibration_refuses_keys_or_values_that_are_no_number_naming_layer_and_head(what, value):
    model = small_llama(16, seed=3)  # 2 query heads and 1 KV head of 16 dims, 2 layers
    rows = {"keys": slice(32, 48), "values": slice(48, 64)}[what]  # qkv_proj: q, then k, v
    with torch.no_grad():
        model.layers[1].self_attn.qkv_proj.weight[rows, 0] = value
    with pytest.raises(ValueError, match=rf"layer 1, KV head 0's {what} hold (nan|inf)") as no:
        calibrate_kv_scales(model, list(range(8)), torch.float8_e4m3fn, block_size=4)
    assert "kv_cache_dtype='auto'" in str(no.value) and "\n" not in str(no.value)


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_refused_scale_leaves_the_caches_scales_finite(value):
    cache = KVCache(2, 4, 2, 4, 8, dtype=torch.float8_e4m3fn)
    scale = torch.full((2, 2), 0.5)
    scale[1, 1] = value
    with pytest.raises(ValueError):
        cache.set_scales(torch.full((2, 2), 0.5), scale)
    assert torch.isfinite(cache.k_scale).all() and torch.isfinite(cache.v_scale).all()
