"""Checks for exercise 09: writing a step's keys and values at their slots, in Numba CUDA
(vLLM's ``reshape_and_cache``), run in Numba's CUDA simulator.

The student's ``cache_ops.py`` mirrors ``cuda_kernels.cache_ops`` (``reshape_and_cache``).
This module imports no numba itself: the grader runs its checks in a simulator process.
"""

from __future__ import annotations

import torch

from minipaged.grader.report import CheckFailed, Criterion

SENTINEL = -7.0
"""What every slot of the pools holds before a write; a slot that should not change keeps it."""


def check_cache_write(student):
    """reshape_and_cache writes token i at slot s (block s // B, offset s mod B); s < 0: nowhere"""
    gen = torch.Generator().manual_seed(0)
    num_blocks, num_kv_heads, block_size, head_dim = 6, 2, 4, 4
    key = torch.randn(5, num_kv_heads, head_dim, generator=gen)
    value = torch.randn(5, num_kv_heads, head_dim, generator=gen)
    slots = torch.tensor([5, 0, -1, 22, 9])
    key_pool = torch.full((num_blocks, num_kv_heads, block_size, head_dim), SENTINEL)
    value_pool = key_pool.clone()
    expected_k, expected_v = key_pool.clone(), value_pool.clone()
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            expected_k[slot // block_size, :, slot % block_size] = key[i]
            expected_v[slot // block_size, :, slot % block_size] = value[i]
    student.cache_ops.reshape_and_cache(key, value, key_pool, value_pool, slots)
    for name, got, expected in (
        ("key_pool", key_pool, expected_k),
        ("value_pool", value_pool, expected_v),
    ):
        wrong = (got != expected).any(dim=(1, 3)).nonzero().tolist()  # [block, offset] pairs
        if wrong:
            block, offset = wrong[0]
            slot = block * block_size + offset
            writer = [i for i, s in enumerate(slots.tolist()) if s == slot]
            should = f"token {writer[0]}'s vector" if writer else f"{SENTINEL} (no token's slot)"
            padded = [s for s in slots.tolist() if s < 0 and s + num_blocks * block_size == slot]
            if padded and not writer:
                raise CheckFailed(
                    f"after reshape_and_cache(key, value, key_pool, value_pool, "
                    f"slot_mapping={slots.tolist()}) with B={block_size}, {name} slot {slot} "
                    f"was written: slot {padded[0]}, counted from the pool's end as a negative "
                    "index is. A slot s < 0 marks a padded token, whose key and value go "
                    "nowhere: skip it (if slot < 0: return)"
                )
            raise CheckFailed(
                f"after reshape_and_cache(key, value, key_pool, value_pool, "
                f"slot_mapping={slots.tolist()}) with B={block_size}, {name}[{block}, :, {offset}] "
                f"(slot {slot}) should hold {should}; it holds "
                f"{got[block, 0, offset].tolist()} for KV head 0"
            )


def check_a_token_wider_than_the_block_of_threads(student):
    """a token of more values than threads is written whole: thread t takes t, t + T, ..."""
    gen = torch.Generator().manual_seed(1)
    num_kv_heads, block_size, head_dim = 4, 2, 16  # 64 values a token, more than T = 32
    key = torch.randn(2, num_kv_heads, head_dim, generator=gen)
    value = torch.randn(2, num_kv_heads, head_dim, generator=gen)
    key_pool = torch.full((3, num_kv_heads, block_size, head_dim), SENTINEL)
    value_pool = key_pool.clone()
    student.cache_ops.reshape_and_cache(key, value, key_pool, value_pool, torch.tensor([5, 0]))
    for name, got, source in (("key_pool", key_pool, key), ("value_pool", value_pool, value)):
        for token, (block, offset) in enumerate(((2, 1), (0, 0))):
            missing = (got[block, :, offset] != source[token]).nonzero().tolist()
            if missing:
                kv_head, d = missing[0]
                element = kv_head * head_dim + d
                raise CheckFailed(
                    "after reshape_and_cache(key, value, key_pool, value_pool, "
                    f"slot_mapping=[5, 0]) with {num_kv_heads * head_dim} values a token, "
                    f"{name}[{block}, {kv_head}, {offset}, {d}] (token {token}'s element "
                    f"{element} of {num_kv_heads * head_dim}) was not written. With "
                    "T = cuda.blockDim.x threads, thread t must write elements t, t + T, "
                    "t + 2T, ...: a loop, not one element per thread"
                )


CRITERIA = (
    Criterion(check_cache_write, runs_in="simulator"),
    Criterion(check_a_token_wider_than_the_block_of_threads, runs_in="simulator"),
)
