"""A decode kernel's pool and scale arrays are made once and kept (``cuda_kernels.pool_arrays``,
``cuda_kernels.decode_arguments.scale_array``), and whatever a caller does to a pool or a scale
between calls, in place or not, the next call computes exactly what a first call with the same
tensors computes."""

from __future__ import annotations

import gc
import re
import weakref

import pytest
import torch

pytest.importorskip("numba", reason="the kernels' wrappers need numba")

from cuda_kernels import cpu, pool_arrays
from cuda_kernels.decode_arguments import fp8_arguments
from minipaged import attention, fp8

B, NUM_BLOCKS, NUM_KV_HEADS = 4, 8, 2
POOL = (NUM_BLOCKS, NUM_KV_HEADS, B, 8)  # [num_blocks, N_KV, B, d_h]
FP8 = fp8.KV_CACHE_DTYPES["fp8_e4m3"]
KERNELS = {"v1": cpu.paged_attention_decode, "v2": cpu.paged_attention_decode_v2}


def arguments(dtype: torch.dtype = torch.float32, seed: int = 0) -> dict:
    """A decode call: sequences of 9 and 5 tokens over a pool of 8 blocks, its pools float32
    or FP8 (with one scale per KV head)."""
    gen = torch.Generator().manual_seed(seed)
    call = {
        "query": torch.randn(2, 4, 8, generator=gen),
        "key_pool": torch.randn(POOL, generator=gen),
        "value_pool": torch.randn(POOL, generator=gen),
        "block_tables": torch.tensor([[6, 1, 2], [3, 0, -1]], dtype=torch.int32),
        "seq_lens": torch.tensor([9, 5], dtype=torch.int32),
        "scale": 8**-0.5,
        "block_size": B,
    }
    if dtype in fp8.KV_CACHE_DTYPES.values():
        for pool, scale in (("key_pool", "k_scale"), ("value_pool", "v_scale")):
            call[scale] = torch.rand(NUM_KV_HEADS, generator=gen) / 50 + 0.01
            call[pool] = fp8.quantize(call[pool], call[scale].view(-1, 1, 1), dtype)
    return call


def run(kernel: str, call: dict) -> torch.Tensor:
    return KERNELS[kernel](**call)


def fresh(call: dict) -> dict:
    """The same call with every tensor a new object: nothing remembered applies to it."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in call.items()}


def new_pool(call: dict, name: str) -> torch.Tensor:
    """Other values for pool ``name``, in its dtype."""
    other = arguments(seed=1)[name]
    if name == "key_pool" and "k_scale" in call:
        return fp8.quantize(other, call["k_scale"].view(-1, 1, 1), call[name].dtype)
    if name == "value_pool" and "v_scale" in call:
        return fp8.quantize(other, call["v_scale"].view(-1, 1, 1), call[name].dtype)
    return other


def larger(call: dict, name: str, other: torch.Tensor) -> None:
    """Pool ``name`` moved to twice the blocks (the first ones ``other``: the tables still read
    them), and the other pool with it, as the two must keep one shape."""
    for pool in ("key_pool", "value_pool"):
        values = other if pool == name else call[pool].clone()
        call[pool].set_(torch.cat([values, values.flip(0)]))


def through_numpy(call: dict, name: str, other: torch.Tensor) -> None:
    """``other``'s bytes written through a NumPy view: torch's version counter does not move."""
    call[name].view(torch.uint8).numpy()[:] = other.view(torch.uint8).numpy()


IN_PLACE = {
    # what a caller does to pool `name` between two calls, keeping the pool object (resize_
    # is not among them: torch refuses to resize memory a NumPy array shares, as every
    # kernel array of a pool on the CPU does, and did when it was made on every call)
    "new values written": lambda call, name, other: call[name].copy_(other),
    "moved to new memory (set_)": lambda call, name, other: call[name].set_(other.clone()),
    "moved to new memory (.data)": lambda call, name, other: setattr(call[name], "data", other),
    "moved to a larger pool (set_)": larger,
    "written through a NumPy view": through_numpy,
}


@pytest.mark.parametrize("dtype", [torch.float32, FP8], ids=["fp32", "fp8"])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("pool", ["key_pool", "value_pool"])
@pytest.mark.parametrize("change", IN_PLACE)
def test_a_pool_changed_in_place_between_calls_reads_as_on_a_first_call(
    change, pool, kernel, dtype
):
    call = arguments(dtype)
    run(kernel, call)  # its arrays are made and remembered
    IN_PLACE[change](call, pool, new_pool(call, pool))
    again = run(kernel, call)
    assert torch.equal(again, run(kernel, fresh(call)))
    assert not torch.equal(again, run(kernel, arguments(dtype)))  # the change was read


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_pool_is_turned_into_its_kernel_array_once(kernel):
    call = arguments(FP8)
    run(kernel, call)
    made = pool_arrays.remembered[id(call["key_pool"])][3]
    run(kernel, call)
    assert pool_arrays.remembered[id(call["key_pool"])][3] is made


def test_a_collected_pool_leaves_nothing_remembered():
    call = arguments(FP8)
    run("v1", call)
    key = id(call["key_pool"])
    array = weakref.ref(pool_arrays.remembered[key][3])
    memory = weakref.ref(pool_arrays.remembered[key][3].base)  # the view that holds the bytes
    del call
    gc.collect()
    assert key not in pool_arrays.remembered
    assert array() is None and memory() is None


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("scale", ["k_scale", "v_scale"])
def test_a_scale_changed_in_place_is_read_anew(scale, kernel):
    call = arguments(FP8)
    run(kernel, call)
    call[scale].numpy()[0] *= 3  # through NumPy: torch's version counter does not move
    again = run(kernel, call)
    assert torch.equal(again, run(kernel, fresh(call)))
    assert not torch.equal(again, run(kernel, arguments(FP8)))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_scale_of_another_dtype_reads_as_its_float32_rounding(dtype, kernel):
    call = arguments(FP8)
    narrow = {**call, "k_scale": (call["k_scale"] * 1.0001).to(dtype)}
    narrow["v_scale"] = (call["v_scale"] / 3).to(dtype)
    rounded = {**narrow, "k_scale": narrow["k_scale"].float(), "v_scale": narrow["v_scale"].float()}
    assert torch.equal(run(kernel, narrow), run(kernel, rounded))


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_float64_scale_is_refused_as_on_every_path(kernel):
    """One rule with the reference (``attention_call.check_kv_scales``): a float64 scale would
    turn the reference's call to float64, so every path refuses it, naming the fix."""
    call = arguments(FP8)
    with pytest.raises(TypeError, match=r"k_scale is float64.*k_scale\.float\(\)"):
        run(kernel, {**call, "k_scale": call["k_scale"].double()})


WRONG_SHAPES = [(), (NUM_KV_HEADS - 1,), (NUM_KV_HEADS + 1,), (NUM_KV_HEADS, 1), (1, NUM_KV_HEADS)]
"""Scale shapes that are not ``[num_kv_heads]``: a number, one head short or over (of the right
rank, so only the length can tell), and the right count in two dimensions."""


@pytest.mark.parametrize("shape", WRONG_SHAPES, ids=str)
@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
@pytest.mark.parametrize("kernel", [*KERNELS, "reference"])
def test_a_scale_not_one_per_kv_head_is_refused_naming_the_count(kernel, name, shape):
    """Every path (the twins and the reference, ``attention_call.check_kv_scales``) refuses a
    scale of any other shape before it runs, naming the count of KV heads, whichever of the
    two scales it is: a short one would have the kernel read past its end."""
    call = {**arguments(FP8), name: torch.full(shape, 0.02)}
    path = attention.paged_attention_decode if kernel == "reference" else KERNELS[kernel]
    refusal = rf"{name} must be \[num_kv_heads\] = \[{NUM_KV_HEADS}\]"
    with pytest.raises(ValueError, match=refusal + ".*" + re.escape(f"got shape {list(shape)}")):
        path(**call)


def test_a_scale_off_the_host_is_handed_on_without_reading_its_values():
    """A scale on a GPU is converted where it is, never read back (``tolist`` would make the
    host wait once per layer per step). A ``meta`` tensor stands in for it here: it has no
    values, so reading them raises."""
    pool = torch.empty(8, 2, 16, 4, dtype=torch.float8_e4m3fn, device="meta")
    scale = torch.full((2,), 0.5, device="meta")

    def as_given(tensor, name):
        return tensor

    k, v, _ = fp8_arguments(pool, scale, scale, as_given, lambda dtype, device, make: None)
    assert k.device.type == v.device.type == "meta" and k.dtype == torch.float32
    assert k.shape == v.shape == (2,)
