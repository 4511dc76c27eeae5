"""The KV-cache operations the block manager asks for, on the device: vLLM's ``cache_ops``.

- ``reshape_and_cache``: write a step's keys and values at their slots, one thread block
  per token (what ``minipaged.kv_cache.write_kv`` does in torch);
- ``copy_blocks``: copy-on-write (§5), one thread block per ``(src, dst)`` pair, within
  one layer's pools (what ``minipaged.kv_cache.KVCache.copy_blocks`` does);
- ``swap_blocks``: swapping (§6) between a device pool and a host pool: one memory copy
  per block, as vLLM issues one ``cudaMemcpyAsync`` per block. The copy engine moves bytes
  between host and device; a kernel could not reach ordinary host memory.

Each checks its arguments before moving anything, so a rejected call leaves every pool as it was.
In the kernels, each thread copies elements ``thread``, ``thread + T``, ... of a token's
``[num_kv_heads, head_dim]`` or of a block's ``[num_kv_heads, B, head_dim]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numba import cuda

from cuda_kernels.launch import NUM_THREADS, kernel_array, launch_stream, transfer_array
from minipaged.contract import check_copy_pairs, check_swap_pairs, check_write


@cuda.jit
def reshape_and_cache_kernel(key, value, key_pool, value_pool, slot_mapping):
    """Thread block i writes token i's key and value ``[num_kv_heads, head_dim]`` into block
    ``slot // B`` at offset ``slot % B``, or nothing when its slot is negative."""
    token = cuda.blockIdx.x
    slot = slot_mapping[token]
    if slot < 0:
        return
    block_size = key_pool.shape[2]  # B
    block = slot // block_size
    offset = slot % block_size
    num_kv_heads, head_dim = key.shape[1], key.shape[2]
    for e in range(cuda.threadIdx.x, num_kv_heads * head_dim, cuda.blockDim.x):
        kv_head, d = e // head_dim, e % head_dim
        key_pool[block, kv_head, offset, d] = key[token, kv_head, d]
        value_pool[block, kv_head, offset, d] = value[token, kv_head, d]


@cuda.jit
def copy_blocks_kernel(key_pool, value_pool, pairs):
    """Thread block k copies block ``pairs[k, 0]`` onto block ``pairs[k, 1]``, keys and values,
    in one layer's pools."""
    src, dst = pairs[cuda.blockIdx.x, 0], pairs[cuda.blockIdx.x, 1]
    _, num_kv_heads, block_size, head_dim = key_pool.shape
    for e in range(cuda.threadIdx.x, num_kv_heads * block_size * head_dim, cuda.blockDim.x):
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
    ``slot_mapping[i]`` $= \\mathcal{T}_r[j] \\cdot B + o$ of the pools
    ``[num_blocks, num_kv_heads, B, head_dim]``; a negative slot is skipped. Same contract as
    ``minipaged.kv_cache.write_kv`` (note the argument order: vLLM's)."""
    if check_write(key_pool, value_pool, key, value, slot_mapping).numel() == 0:
        return
    args = (
        kernel_array(key, "key"),
        kernel_array(value, "value"),
        kernel_array(key_pool, "key_pool"),
        kernel_array(value_pool, "value_pool"),
        kernel_array(slot_mapping.to(torch.int64), "slot_mapping"),
    )
    reshape_and_cache_kernel[slot_mapping.shape[0], NUM_THREADS, launch_stream()](*args)


def copy_blocks(
    key_pools: Sequence[torch.Tensor],
    value_pools: Sequence[torch.Tensor],
    pairs: Sequence[tuple[int, int]],
) -> None:
    """Copy-on-write (§5): for each ``(src, dst)``, block ``dst`` becomes a copy of block
    ``src`` in every layer's key and value pools (one ``[num_blocks, num_kv_heads, B, head_dim]``
    tensor per layer). No destination may be a source and destinations are distinct, so the
    order of the copies does not matter."""
    if not check_copy_pairs(key_pools, value_pools, pairs):
        return
    block_pairs = torch.tensor(pairs, dtype=torch.int64, device=key_pools[0].device)  # [n, 2]
    layers = [
        (kernel_array(key_pool, "key_pool"), kernel_array(value_pool, "value_pool"))
        for key_pool, value_pool in zip(key_pools, value_pools, strict=True)
    ]
    block_pairs_array = kernel_array(block_pairs, "pairs")
    stream = launch_stream()
    for key_pool, value_pool in layers:  # one launch per layer
        copy_blocks_kernel[len(pairs), NUM_THREADS, stream](key_pool, value_pool, block_pairs_array)


def swap_blocks(
    src_pool: torch.Tensor, dst_pool: torch.Tensor, mapping: Sequence[tuple[int, int]]
) -> None:
    """Swapping (§6): for each ``(src, dst)``, copy block ``src`` of ``src_pool`` onto block
    ``dst`` of ``dst_pool``, byte for byte. One pool is usually on the device and the other on
    the host (swap out: device to host; swap in: host to device); call once per layer and per
    key and value pool. Pinned host memory makes the transfers faster, not different."""
    check_swap_pairs(src_pool, dst_pool, mapping)
    src, dst = transfer_array(src_pool), transfer_array(dst_pool)
    if isinstance(src, np.ndarray) and isinstance(dst, np.ndarray):
        for s, d in mapping:  # host to host: every swap in the simulator, whose "device" is host
            dst[d] = src[s]
        return
    stream = launch_stream()
    for s, d in mapping:
        if isinstance(dst, np.ndarray):
            src[s].copy_to_host(dst[d], stream=stream)  # device to host: swap out
        else:
            dst[d].copy_to_device(src[s], stream=stream)  # host (or device) to device: swap in
    stream.synchronize()  # the copies are complete, in host memory too, when this returns
