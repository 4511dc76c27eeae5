"""Checks for exercise 08: a first Numba CUDA kernel, copy-on-write's block copy (source text
§5), run in Numba's CUDA simulator.

The student's ``cache_ops.py`` mirrors ``cuda_kernels.cache_ops`` (``copy_blocks``): thread
block $k$ copies block ``pairs[k, 0]`` onto block ``pairs[k, 1]``, one thread per element, in
rounds of $T$ threads. This module imports no numba itself: the grader runs its checks in a
simulator process.
"""

from __future__ import annotations

import torch

from minipaged.grader.report import CheckFailed, Criterion


def _pools(num_blocks: int, num_kv_heads: int, block_size: int, head_dim: int):
    """Key and value pools whose every element is a different number."""
    shape = (num_blocks, num_kv_heads, block_size, head_dim)
    key_pool = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    return key_pool, -key_pool - 1


def _copied(pool: torch.Tensor, pairs) -> torch.Tensor:
    """``pool`` after copying block ``src`` onto block ``dst`` for each pair, in order."""
    copy = pool.clone()
    for src, dst in pairs:
        copy[dst] = pool[src]
    return copy


def _copy_and_compare(student, pairs, shape) -> None:
    key_pool, value_pool = _pools(*shape)
    before = {"key_pool": key_pool.clone(), "value_pool": value_pool.clone()}
    expected_k, expected_v = _copied(key_pool, pairs), _copied(value_pool, pairs)
    student.cache_ops.copy_blocks([key_pool], [value_pool], pairs)
    _, num_kv_heads, block_size, head_dim = shape
    call = f"after copy_blocks(pairs={pairs}) on pools of shape {list(shape)}"
    for name, got, expected in (
        ("key_pool", key_pool, expected_k),
        ("value_pool", value_pool, expected_v),
    ):
        if torch.equal(got, expected):
            continue
        if torch.equal(got, _copied(before[name], [(dst, src) for src, dst in pairs])):
            raise CheckFailed(
                f"{call}, {name} holds each pair's dst copied onto its src: the two are "
                "swapped. Pair k is (src, dst): thread block k reads pairs[k, 0] and writes "
                "pairs[k, 1]"
            )
        if name == "value_pool" and torch.equal(got, before[name]):
            raise CheckFailed(
                f"{call}, key_pool is right but value_pool did not change: a block's copy is "
                "its keys and its values, so copy value_pool[src] onto value_pool[dst] too"
            )
        wrong = (got != expected).nonzero().tolist()
        if wrong:
            block, kv_head, offset, d = wrong[0]
            element = (kv_head * block_size + offset) * head_dim + d
            copied = [dst for _, dst in pairs]
            what = (
                f"should be a copy of block {pairs[copied.index(block)][0]}"
                if block in copied
                else "is no destination and should not change"
            )
            at, size = (block, kv_head, offset, d), num_kv_heads * block_size * head_dim
            raise CheckFailed(
                f"{call}, {name}[{block}, {kv_head}, {offset}, {d}] (element {element} of the "
                f"block's {size}) is {got[at]:g}, expected {expected[at]:g}: block {block} {what}"
            )


def check_one_pair(student):
    """thread block 0 copies every element of block src onto block dst, keys and values"""
    _copy_and_compare(student, [(1, 3)], (4, 1, 4, 8))


def check_several_pairs(student):
    """thread block k copies pair k: several pairs in one launch, and nothing else changes"""
    _copy_and_compare(student, [(0, 4), (2, 1), (5, 3)], (6, 2, 2, 4))


def check_blocks_larger_than_the_threads(student):
    """a block of more elements than threads is copied whole: thread t takes t, t + T, ..."""
    _copy_and_compare(student, [(2, 0)], (3, 2, 8, 16))  # 256 elements, T = 32 threads


CRITERIA = tuple(
    Criterion(check, runs_in="simulator")
    for check in (check_one_pair, check_several_pairs, check_blocks_larger_than_the_threads)
)
