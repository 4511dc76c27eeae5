"""Bad input to ``KVCache``: a dtype the attention does not read pools in, a device that is
not there, block pairs that are not pairs of block ids. Each is refused by name before any
tensor is made or moved: a refused copy or swap leaves every pool as it was."""

from __future__ import annotations

import pytest
import torch

from minipaged.kv_cache import VIEW_BYTES_PER_LAYER, KVCache
from minipaged.python_numbers import MAX_COUNT

SIZES = {"num_layers": 2, "num_blocks": 4, "num_kv_heads": 2, "block_size": 4, "head_dim": 8}


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8]
)
def test_a_pool_dtype_the_attention_cannot_read_is_refused(dtype):
    with pytest.raises(ValueError, match="dtype must be a dtype the attention reads pools in"):
        KVCache(**SIZES, dtype=dtype)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]
)
def test_every_dtype_the_engine_makes_is_taken(dtype):
    assert KVCache(**SIZES, dtype=dtype).key[0].dtype == dtype


@pytest.mark.parametrize("device", ["gpu", "tpu:0", "cuda:99"])
def test_a_device_that_is_not_there_is_a_value_error_naming_it(device):
    with pytest.raises(ValueError, match=device.split(":")[0]):
        KVCache(**SIZES, device=device)


def test_a_cache_of_shapes_only_is_made_on_meta():
    assert KVCache(**SIZES, device="meta").key[0].is_meta


BAD_PAIRS = {
    "a string": "ab",
    "a dict": {0: 1},
    "one id": [(0,)],
    "three ids": [(0, 1, 2)],
    "a bool": [(True, 1)],
    "a float": [(0.5, 1)],
    "None": [None],
    "a pair of strings": [("0", "1")],
}


@pytest.fixture
def cache():
    cache = KVCache(**SIZES, num_cpu_blocks=2)
    generator = torch.Generator().manual_seed(0)
    for pool in (cache._key, cache._value, cache._host_key, cache._host_value):
        pool.copy_(torch.randn(pool.shape, generator=generator))
    return cache


@pytest.mark.parametrize("operation", ["copy_blocks", "swap_out", "swap_in"])
@pytest.mark.parametrize("case", BAD_PAIRS)
def test_block_pairs_that_are_not_two_ids_are_refused_moving_nothing(cache, operation, case):
    pools = [t.clone() for t in (cache._key, cache._value, cache._host_key, cache._host_value)]
    with pytest.raises(TypeError, match=r"each block pair must be \(src, dst\)"):
        getattr(cache, operation)(BAD_PAIRS[case])
    after = (cache._key, cache._value, cache._host_key, cache._host_value)
    assert all(torch.equal(a, b) for a, b in zip(pools, after, strict=True))


class OnlyCopies:
    """Half a kernel module: copies, but no swaps."""

    def copy_blocks(self, key_pools, value_pools, pairs): ...


@pytest.mark.parametrize("kernels", [5, "cuda_kernels", object(), OnlyCopies(), True])
def test_kernels_that_cannot_copy_and_swap_are_refused_when_the_cache_is_made(kernels):
    with pytest.raises(TypeError, match=r"kernels must be None .* or a kernel module"):
        KVCache(**SIZES, kernels=kernels)


def test_the_cpu_twins_are_kernels_a_cache_takes():
    import cuda_kernels.cpu

    assert KVCache(**SIZES, kernels=cuda_kernels.cpu).kernels is cuda_kernels.cpu


HUGE = {**{name: MAX_COUNT for name in SIZES}, "num_cpu_blocks": MAX_COUNT}


# num_blocks on meta is no case: the device pools hold no values there, and a host block's
# bytes do not grow with it
CASES = [
    (name, device)
    for device in ("cpu", "meta")
    for name in HUGE
    if (name, device) != ("num_blocks", "meta")
]


@pytest.mark.parametrize(("name", "device"), CASES)
def test_pools_no_memory_holds_are_refused_naming_their_bytes_before_any_is_made(name, device):
    """Every size is an integer in its range, but the pools (on meta, the host pools and
    every layer's views) would not fit: refused with their bytes and the settings that lower
    them, where torch would fail mid-allocation or the OS would end the process."""
    sizes = {**SIZES, "num_cpu_blocks": 1, name: HUGE[name]}
    with pytest.raises(ValueError, match=r"the KV cache would take [\d,.]+ [GMK]iB \([\d,]+ bytes"):
        KVCache(**sizes, device=device)


# -- where the pools must fit: a CUDA device's pools in its memory, the host's in the host's ----

BLOCKS = {"device": 3, "host": 3}
FREE_BLOCKS = {  # (device memory, host memory) free, in blocks; and where the refusal is
    "both fit apart (they would not fit together)": ((4, 4), None),
    "the device pools overflow the device": ((2, 9), " on cuda"),
    "the host pools overflow the host": ((9, 2), " on the host"),
}
WIDE = {**SIZES, "head_dim": 1024, "block_size": 64}  # 2 MiB blocks, 8 KiB of layers' views


def with_free_memory(monkeypatch, device_free: int, host_free: int) -> None:
    """The device's free memory (``torch.cuda.mem_get_info``) and the host's, injected: no
    GPU here, and the check must read each where it belongs."""
    from minipaged import device

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda where=None: (device_free, 10**15))
    monkeypatch.setattr(device, "free_memory", lambda: host_free)


def fit_on_llm(device: str) -> None:
    from minipaged.config import EngineConfig
    from minipaged.llm import check_kv_cache_fits

    blocks = {"num_gpu_blocks": BLOCKS["device"], "num_cpu_blocks": BLOCKS["host"]}
    check_kv_cache_fits(EngineConfig(model="tiny", device=device, **blocks))


def fit_on_kv_cache(device: str) -> None:
    from minipaged.kv_cache import check_pools_fit

    sizes = {**WIDE, "num_blocks": BLOCKS["device"], "num_cpu_blocks": BLOCKS["host"]}
    check_pools_fit(sizes, torch.float32, torch.device(device))


def block_bytes_of(check) -> int:
    """One block's bytes as ``check`` counts them: the tiny model's, or ``WIDE``'s."""
    from minipaged.checkpoint import load_config
    from minipaged.memory import ModelShape

    if check is fit_on_kv_cache:
        return WIDE["num_layers"] * 2 * WIDE["num_kv_heads"] * WIDE["head_dim"] * 64 * 4
    model = load_config("tiny")
    shape = (model.num_hidden_layers, model.num_attention_heads, model.num_key_value_heads)
    return ModelShape(*shape, model.head_dim, 4).block_bytes(16)


CHECKS = pytest.mark.parametrize("check", [fit_on_llm, fit_on_kv_cache], ids=["LLM", "KVCache"])


@CHECKS
@pytest.mark.parametrize("case", FREE_BLOCKS)
def test_cuda_pools_are_checked_against_the_device_and_the_swap_pools_against_the_host(
    monkeypatch, check, case
):
    """On CUDA the device pools take the device's memory and the swap pools the host's: each
    is checked against its own (the sum against the host's refused pools that fit)."""
    (device_free, host_free), where = FREE_BLOCKS[case]
    block = block_bytes_of(check)
    views = WIDE["num_layers"] * VIEW_BYTES_PER_LAYER  # the cache's host cost beside its blocks
    with_free_memory(monkeypatch, device_free * block, host_free * block + views)
    if where is None:
        check("cuda")
        return
    with pytest.raises(ValueError, match=f"the KV cache would take .* are free{where}"):
        check("cuda")


@CHECKS
def test_cpu_pools_are_checked_together_against_the_host_and_the_device_is_not_asked(
    monkeypatch, check
):
    block = block_bytes_of(check)
    with_free_memory(monkeypatch, 0, 5 * block)  # 3 + 3 blocks, all of them host memory
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda where=None: pytest.fail("asked"))
    with pytest.raises(ValueError, match=r"3 device blocks .* \+ 3 host blocks.* on the host"):
        check("cpu")
