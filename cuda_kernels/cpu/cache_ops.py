"""The cache operations' CPU twins: ``cuda_kernels/cache_ops.py`` with a ``prange`` iteration
where the CUDA kernel has a thread block.

- ``reshape_and_cache``: iteration $i$ writes token $i$'s key and value at its slot
  (CUDA: thread block $i$);
- ``copy_blocks``: iteration $k$ copies pair $k$'s block, in one layer's pools (CUDA: thread
  block $k$);
- ``swap_blocks``: one copy per block, as the CUDA version issues one memory copy per block;
  on the CPU both pools are host memory.

Inside an iteration, the loop over ``e`` is what the CUDA block's threads share out
(``thread``, ``thread + T``, ...). Each operation checks its arguments first (the same checks
as the CUDA versions, from ``minipaged.contract``), so a rejected call changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numba import njit, prange

from cuda_kernels.cpu.launch import check_device, kernel_array, on_torch_threads
from minipaged.contract import check_copy_pairs, check_swap_pairs, check_write


@njit(parallel=True, cache=True)
def reshape_and_cache_kernel(key, value, key_pool, value_pool, slot_mapping):
    """Iteration i writes token i's key and value ``[num_kv_heads, head_dim]`` into block
    ``slot // B`` at offset ``slot % B``, or nothing when its slot is negative."""
    block_size = key_pool.shape[2]  # B
    num_kv_heads, head_dim = key.shape[1], key.shape[2]
    for token in prange(slot_mapping.shape[0]):
        slot = slot_mapping[token]
        if slot >= 0:
            block = slot // block_size
            offset = slot % block_size
            for e in range(num_kv_heads * head_dim):
                kv_head, d = e // head_dim, e % head_dim
                key_pool[block, kv_head, offset, d] = key[token, kv_head, d]
                value_pool[block, kv_head, offset, d] = value[token, kv_head, d]


@njit(parallel=True, cache=True)
def copy_blocks_kernel(key_pool, value_pool, pairs):
    """Iteration k copies block ``pairs[k, 0]`` onto block ``pairs[k, 1]``, keys and values, in
    one layer's pools."""
    _, num_kv_heads, block_size, head_dim = key_pool.shape
    for k in prange(pairs.shape[0]):
        src, dst = pairs[k, 0], pairs[k, 1]
        for e in range(num_kv_heads * block_size * head_dim):
            kv_head = e // (block_size * head_dim)
            offset = (e // head_dim) % block_size
            d = e % head_dim
            key_pool[dst, kv_head, offset, d] = key_pool[src, kv_head, offset, d]
            value_pool[dst, kv_head, offset, d] = value_pool[src, kv_head, offset, d]


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write token $i$'s key and value (``[N, num_kv_heads, head_dim]``) at slot
    ``slot_mapping[i]`` of the pools; a negative slot is skipped. Same contract as
    ``cuda_kernels.reshape_and_cache`` and ``minipaged.kv_cache.write_kv``."""
    if check_write(key_pool, value_pool, key, value, slot_mapping).numel() == 0:
        return
    on_torch_threads(reshape_and_cache_kernel)(
        kernel_array(key.contiguous(), "key"),
        kernel_array(value.contiguous(), "value"),
        kernel_array(key_pool, "key_pool"),
        kernel_array(value_pool, "value_pool"),
        kernel_array(slot_mapping.to(torch.int64).contiguous(), "slot_mapping"),
    )


def copy_blocks(
    key_pools: Sequence[torch.Tensor],
    value_pools: Sequence[torch.Tensor],
    pairs: Sequence[tuple[int, int]],
) -> None:
    """Copy-on-write (§5): for each ``(src, dst)``, block ``dst`` becomes a copy of block
    ``src`` in every layer's key and value pools. Same contract as
    ``cuda_kernels.copy_blocks``."""
    if not check_copy_pairs(key_pools, value_pools, pairs):
        return
    kernel = on_torch_threads(copy_blocks_kernel)
    block_pairs = np.array(pairs, dtype=np.int64).reshape(len(pairs), 2)  # [n, 2]
    for key_pool, value_pool in zip(key_pools, value_pools, strict=True):  # one call per layer
        kernel(
            kernel_array(key_pool, "key_pool"), kernel_array(value_pool, "value_pool"), block_pairs
        )


def swap_blocks(
    src_pool: torch.Tensor, dst_pool: torch.Tensor, mapping: Sequence[tuple[int, int]]
) -> None:
    """Swapping (§6): for each ``(src, dst)``, copy block ``src`` of ``src_pool`` onto block
    ``dst`` of ``dst_pool``, byte for byte. Same contract as ``cuda_kernels.swap_blocks``."""
    check_swap_pairs(src_pool, dst_pool, mapping)
    check_device(src_pool, "src_pool")
    check_device(dst_pool, "dst_pool")
    src, dst = kernel_array(src_pool, "src_pool"), kernel_array(dst_pool, "dst_pool")
    for s, d in mapping:  # one copy per block, as one cudaMemcpyAsync per block
        dst[d] = src[s]
