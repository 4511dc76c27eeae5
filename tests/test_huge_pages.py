"""``bench kernels`` puts every path's keys and values on 2 MiB pages where Linux grants them
(``minipaged.huge_pages``): the copies hold the same values, start on a 2 MiB
boundary, and fall back to ordinary memory where the system cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minipaged import huge_pages, kv_cache
from minipaged.contract import POOL_DTYPES
from minipaged.kv_cache import KVCache
from minipaged.llm import LLM
from minipaged.sampling import SamplingParams
from minipaged.study.bench import kernels

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

SOURCES = {
    "fp32 pool": lambda: torch.randn(8, 2, 16, 32),
    "fp8 e4m3": lambda: torch.randn(8, 2, 16, 32).to(torch.float8_e4m3fn),
    "fp8 e5m2": lambda: torch.randn(4, 4).to(torch.float8_e5m2),
    "int8, odd size": lambda: torch.arange(7, dtype=torch.int8),
    "strided": lambda: torch.randn(16, 32).t()[::2],
    "empty": lambda: torch.empty(0, 3),
    "one byte past a huge page": lambda: torch.ones(huge_pages.HUGE_PAGE + 1, dtype=torch.uint8),
}


@pytest.mark.parametrize("source", SOURCES)
def test_a_copy_on_huge_pages_holds_the_same_values_from_a_2_mib_boundary(source):
    tensor = SOURCES[source]()
    copy = huge_pages.on_huge_pages(tensor)
    assert copy.dtype == tensor.dtype and copy.shape == tensor.shape and copy.is_contiguous()
    assert torch.equal(copy.view(torch.uint8), tensor.contiguous().view(torch.uint8))
    assert copy.data_ptr() % huge_pages.HUGE_PAGE == 0 or not copy.numel()


def test_without_the_advice_the_copy_is_ordinary_memory_with_the_same_values(monkeypatch):
    monkeypatch.setattr(huge_pages, "MADV_HUGEPAGE", None)
    tensor = torch.randn(3, 5)
    assert torch.equal(huge_pages.on_huge_pages(tensor), tensor)


@pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages here"
)
def test_linux_maps_the_copy_in_huge_pages_where_it_grants_them():
    before = huge_pages.huge_page_bytes()
    copy = huge_pages.on_huge_pages(torch.ones(8 * huge_pages.HUGE_PAGE // 4))
    assert huge_pages.huge_page_bytes() - before >= 4 * huge_pages.HUGE_PAGE
    del copy


def test_every_key_and_value_the_cpu_bench_reads_lies_on_huge_pages():
    inputs = kernels.decode_inputs(2, 64, 16, "cpu")
    read = {
        "paged": inputs.paged[1:3],
        "in order": inputs.in_order[1:3],
        "fp8": inputs.fp8[1:3],
        "sdpa": inputs.sdpa[1:],
    }
    off = {
        f"{path} {n}": tensor.data_ptr() % huge_pages.HUGE_PAGE
        for path, tensors in read.items()
        for n, tensor in enumerate(tensors)
    }
    assert not any(off.values()), off


def test_the_note_says_whether_linux_granted_the_pages():
    assert "Linux mapped 6 to 8 MiB" in huge_pages.note([8 * 2**20, 6 * 2**20])
    assert "4 KiB pages" in huge_pages.note([6 * 2**20, 0])


def kv_pools(cache: KVCache) -> list[torch.Tensor]:
    return [*cache.key, *cache.value]


@pytest.mark.parametrize("dtype", POOL_DTYPES, ids=str)
def test_the_engines_cpu_pools_start_on_a_huge_page_and_hold_zeros(dtype):
    cache = KVCache(2, 40, 2, 16, 8, dtype=dtype)
    for whole in (cache._key, cache._value):
        assert whole.data_ptr() % huge_pages.HUGE_PAGE == 0
        assert whole.is_contiguous() and whole.shape == (2, 40, 2, 16, 8)
        assert not whole.float().any()
    assert cache._key.data_ptr() != cache._value.data_ptr()


def test_a_cache_on_meta_allocates_no_memory_to_map():
    assert KVCache(1, 4, 1, 4, 8, device="meta").key[0].is_meta


def test_the_engine_generates_the_same_tokens_from_pools_on_huge_pages(monkeypatch):
    """The tiny model's greedy tokens, pools on 2 MiB pages (the engine's own) against pools
    from ``torch.zeros``: the memory under the pools changes nothing the engine computes."""
    prompts = [[3, 4, 5, 6, 7, 8, 9, 10, 11], [12, 13]]
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)

    def tokens() -> tuple[list[list[int]], list[torch.Tensor]]:
        llm = LLM("tiny", block_size=4, num_gpu_blocks=32, num_cpu_blocks=0)
        outputs = llm.generate(prompts, params)
        return [out.outputs[0].token_ids for out in outputs], kv_pools(llm.engine.kv_cache)

    on_huge_pages, pools = tokens()
    assert pools[0].data_ptr() % huge_pages.HUGE_PAGE == 0  # layer 0 opens the key pool
    zeros = lambda shape, dtype, device: torch.zeros(shape, dtype=dtype, device=device)  # noqa: E731
    monkeypatch.setattr(kv_cache, "pool_zeros", zeros)
    assert tokens()[0] == on_huge_pages
