"""Block and offset swapped: s % B taken for the block, s // B for the offset.

Fails: cache_write
"""

from __future__ import annotations

import torch
from numba import cuda

from cuda_kernels.launch import NUM_THREADS, kernel_array, launch_stream


@cuda.jit
def reshape_and_cache_kernel(key, value, key_pool, value_pool, slot_mapping):
    """Thread block i writes token i's key and value ``[num_kv_heads, head_dim]`` into physical
    block slot // B at offset slot % B, for slot = slot_mapping[i]; a negative slot means
    "write nothing". Thread t copies elements t, t + blockDim.x, ... of the token's
    num_kv_heads * head_dim values."""
    token = cuda.blockIdx.x
    s = slot_mapping[token]
    if s < 0:
        return
    block_size = key_pool.shape[2]
    block = s % block_size
    offset = s // block_size
    heads = key.shape[1]
    dim = key.shape[2]
    for e in range(cuda.threadIdx.x, heads * dim, cuda.blockDim.x):
        h = e // dim
        d = e % dim
        key_pool[block, h, offset, d] = key[token, h, d]
        value_pool[block, h, offset, d] = value[token, h, d]


def reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``key[i]`` and ``value[i]`` (``[N, num_kv_heads, head_dim]``) at slot
    ``slot_mapping[i]`` of the pools ``[num_blocks, num_kv_heads, B, head_dim]``."""
    args = (
        kernel_array(key, "key"),
        kernel_array(value, "value"),
        kernel_array(key_pool, "key_pool"),
        kernel_array(value_pool, "value_pool"),
        kernel_array(slot_mapping.to(torch.int64), "slot_mapping"),
    )
    reshape_and_cache_kernel[slot_mapping.shape[0], NUM_THREADS, launch_stream()](*args)
