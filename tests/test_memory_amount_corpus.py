"""One wording for an amount of memory across the project (``memory.memory_amount``, binary
units): the pools' description, the TUI's gauges, the refusals of pools, of the allocator's
bookkeeping and of a trace too large to load all say the same bytes in the same words, so a
reader can set one beside another. Generated over byte counts on each unit's edges, and over
every f-string of the package, so a new place that words bytes itself fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from minipaged import allocator
from minipaged.allocator import BOOKKEEPING_BYTES_PER_BLOCK, CHECKED_FROM_BLOCKS, BlockAllocator
from minipaged.kv_cache import KVCache
from minipaged.memory import check_fits, memory_amount
from minipaged.trace_schema import Budget, TraceError

ROOT = Path(__file__).resolve().parent.parent

AMOUNTS = [0, 1023, 1024, 8192, 2**20 - 1, 2**20, 41_943_040, 2**30, 16 * 2**30 + 1, 10**13]
"""Byte counts on both sides of every unit's edge."""


@pytest.mark.parametrize("num_bytes", AMOUNTS)
def test_memory_amount_uses_the_largest_binary_unit_that_keeps_it_at_1_or_more(num_bytes):
    said = memory_amount(num_bytes)
    number, unit = re.fullmatch(r"([\d,.]+) (GiB|MiB|KiB|B)", said).groups()
    scale = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1}[unit]
    assert float(number.replace(",", "")) >= 1 or num_bytes == 0
    assert unit == "GiB" or num_bytes < scale * 1024
    assert abs(float(number.replace(",", "")) * scale - num_bytes) <= scale * 0.05


@pytest.mark.parametrize("free", [999, 41_943_039, 16 * 2**30 - 1, 10**11])
def test_every_refusal_about_free_memory_words_the_free_bytes_alike(monkeypatch, free):
    """The allocator's bookkeeping, the KV cache's pools and a trace's load budget."""
    monkeypatch.setattr(allocator, "free_memory", lambda: free)
    refusals = []
    with pytest.raises(ValueError) as bookkeeping:
        BlockAllocator(max(CHECKED_FROM_BLOCKS, free // BOOKKEEPING_BYTES_PER_BLOCK + 1))
    refusals.append(str(bookkeeping.value))
    with pytest.raises(ValueError) as pools:
        check_fits(free + 1, free, "pools", "lower them", "")
    refusals.append(str(pools.value))
    with pytest.raises(TraceError) as trace:
        Budget(2 * free).afford(free + 1, "the trace")
    refusals.append(str(trace.value))
    for refusal in refusals:
        assert memory_amount(free) in refusal, refusal


def test_the_pools_description_words_their_bytes_as_a_refusal_would():
    cache = KVCache(2, 10, 2, 4, 8, num_cpu_blocks=3)
    total = cache.num_blocks * cache.bytes_per_block
    assert f"= {memory_amount(total)}," in cache.describe()


WORDED_ELSEWHERE = {
    ("minipaged/model_card.py", "num_params / 1000000.0"): "parameters, in millions",
    ("minipaged/model_card.py", "4 * num_params / 1000000.0"): "a file's size on a model card",
    ("minipaged/study/bench/memory.py", "budget / 1000000000.0"): "the source text's GB of HBM",
    ("minipaged/grader/runtime_code.py", "MAX_RECORDED // 2 ** 20"): "a limit, in its unit",
    ("minipaged/grader/disk_quota.py", "self.allowed / 2 ** 30"): "--disk-limit's own unit",
    ("minipaged/huge_pages.py", "min(mapped) / 2 ** 20"): "huge pages of 2 MiB",
    ("minipaged/huge_pages.py", "max(mapped) / 2 ** 20"): "huge pages of 2 MiB",
}
"""f-string values that scale a number by a unit of bytes without ``memory_amount``, each
with why: none of them is an amount of free or used memory a person compares."""

UNIT = re.compile(r"2 \*\* (10|20|30)\b|10 \*\* [369]\b|\b1024\b|\b1000(000)*\.0\b")


def scaled_values():
    """``(file, expression)`` for each f-string value of the package that scales by a unit."""
    found = []
    for root in ("minipaged", "tui", "cuda_kernels"):
        for file in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FormattedValue) and UNIT.search(ast.unparse(node.value)):
                    found.append((file.relative_to(ROOT).as_posix(), ast.unparse(node.value)))
    return found


def test_no_module_words_an_amount_of_memory_itself():
    worded_alone = [found for found in scaled_values() if found not in WORDED_ELSEWHERE]
    assert not worded_alone, f"use minipaged.memory.memory_amount: {worded_alone}"


def test_every_exception_named_above_is_still_there():
    assert set(WORDED_ELSEWHERE) <= set(scaled_values())
