"""Exercise 09: write keys and values into the paged pool, on the GPU.

Fill in the kernel body, then run

    minipaged exercises check 9

which runs it in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, on the CPU). The host function
below is written for you; it launches one thread block per token with ``NUM_THREADS`` threads.
The names and signatures are those of ``cuda_kernels.cache_ops``.
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
    # --- your code here (about 10 lines) ---
    raise NotImplementedError("exercise 09: write token i at its slot")


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
