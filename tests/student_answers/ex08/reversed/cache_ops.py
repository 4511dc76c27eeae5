"""The copy runs from dst onto src.

Fails: one_pair
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from numba import cuda

from cuda_kernels.launch import NUM_THREADS, kernel_array, launch_stream


@cuda.jit
def copy_blocks_kernel(key_pool, value_pool, pairs):
    """Thread block k copies block ``pairs[k, 0]`` onto block ``pairs[k, 1]``, keys and values,
    in one layer's pools ``[num_blocks, num_kv_heads, B, head_dim]``. A block holds
    num_kv_heads * B * head_dim elements; thread t copies elements t, t + blockDim.x, ...
    Useful: ``cuda.blockIdx.x``, ``cuda.threadIdx.x``, ``cuda.blockDim.x``, ``key_pool.shape``."""
    pair = cuda.blockIdx.x
    src = pairs[pair, 0]
    dst = pairs[pair, 1]
    heads = key_pool.shape[1]
    size = key_pool.shape[2]
    dim = key_pool.shape[3]
    total = heads * size * dim
    i = cuda.threadIdx.x
    while i < total:
        h = i // (size * dim)
        r = i % (size * dim)
        o = r // dim
        d = r % dim
        key_pool[src, h, o, d] = key_pool[dst, h, o, d]
        value_pool[src, h, o, d] = value_pool[dst, h, o, d]
        i += cuda.blockDim.x


def copy_blocks(
    key_pools: Sequence[torch.Tensor],
    value_pools: Sequence[torch.Tensor],
    pairs: Sequence[tuple[int, int]],
) -> None:
    """For each ``(src, dst)``, block ``dst`` becomes a copy of block ``src`` in every layer's
    key and value pools (one ``[num_blocks, num_kv_heads, B, head_dim]`` tensor per layer)."""
    if not pairs:
        return
    block_pairs = torch.tensor(pairs, dtype=torch.int64, device=key_pools[0].device)  # [n, 2]
    block_pairs_array = kernel_array(block_pairs, "pairs")
    for key_pool, value_pool in zip(key_pools, value_pools, strict=True):  # one launch a layer
        copy_blocks_kernel[len(pairs), NUM_THREADS, launch_stream()](
            kernel_array(key_pool, "key_pool"),
            kernel_array(value_pool, "value_pool"),
            block_pairs_array,
        )
