"""``bench kernels`` puts every path's keys and values on 2 MiB pages where Linux grants them
(``minipaged.study.bench.huge_pages``): the copies hold the same values, start on a 2 MiB
boundary, and fall back to ordinary memory where the system cannot."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minipaged.study.bench import huge_pages, kernels

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
