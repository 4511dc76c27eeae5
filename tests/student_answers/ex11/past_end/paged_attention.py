"""The output loop runs to tau = L: one token past the sequence's end.

Fails: decode_one_head
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from numba import cuda, float32, int32

from cuda_kernels.block_reduce import REDUCTION, block_reductions
from cuda_kernels.launch import NUM_THREADS, kernel_array, launch_stream

NEG_INF = np.float32(-np.inf)  # float32 constants keep the kernel in float32
ZERO = np.float32(0.0)


@functools.cache
def decode_kernel(head_dim: int, num_threads: int = NUM_THREADS):
    """The kernel for one head_dim and T = num_threads threads per block (both size shared
    memory, so the kernel is compiled for each)."""
    block_max, block_sum = block_reductions(REDUCTION)  # every thread gets the block's max/sum

    @cuda.jit
    def paged_attention_v1(out, query, key_pool, value_pool, block_tables, seq_lens, scale):
        """Thread block (h, r) writes out[r, h]: attention of query head h of sequence r over
        its L = seq_lens[r] tokens; token tau lives in block T_r[tau // B] at offset tau % B,
        with T_r = block_tables[r], in KV head h // (num_heads / num_kv_heads).

        ``block_max(value, scratch)`` and ``block_sum(value, scratch)`` take one float32 from
        every thread and return the block's max (sum) to all of them; ``scratch`` is a shared
        array of num_threads float32. Useful: ``cuda.shared.array(n, float32)``,
        ``cuda.syncthreads()``, ``math.exp``, ``cuda.threadIdx.x``, ``cuda.blockIdx.x/.y``."""
        h = cuda.blockIdx.x
        r = cuda.blockIdx.y
        t = cuda.threadIdx.x
        T = cuda.blockDim.x
        q = cuda.shared.array(head_dim, float32)
        scratch = cuda.shared.array(num_threads, float32)
        for d in range(t, head_dim, T):
            q[d] = query[r, h, d]
        cuda.syncthreads()
        length = seq_lens[r]
        B = key_pool.shape[2]
        kv = h // (query.shape[1] // key_pool.shape[1])
        best = NEG_INF
        for tau in range(t, length, T):
            p = block_tables[r, tau // B]
            s = ZERO
            for d in range(head_dim):
                s += q[d] * key_pool[p, kv, tau % B, d]
            s *= scale
            best = max(best, s)
        m = block_max(best, scratch)
        part = ZERO
        for tau in range(t, length, T):
            p = block_tables[r, tau // B]
            s = ZERO
            for d in range(head_dim):
                s += q[d] * key_pool[p, kv, tau % B, d]
            part += math.exp(s * scale - m)
        l = block_sum(part, scratch)
        for d in range(t, head_dim, T):
            acc = ZERO
            for tau in range(length + 1):
                p = block_tables[r, tau // B]
                s = ZERO
                for e in range(head_dim):
                    s += q[e] * key_pool[p, kv, tau % B, e]
                acc += math.exp(s * scale - m) * value_pool[p, kv, tau % B, d]
            out[r, h, d] = acc / l

    return paged_attention_v1


def paged_attention_decode(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_size: int,
) -> torch.Tensor:
    """Same arguments and result as ``minipaged.attention.paged_attention_decode`` (float32
    tensors; on the GPU, or on the CPU under the simulator)."""
    batch_size, num_heads, head_dim = query.shape
    output = torch.empty_like(query)  # [batch, num_heads, head_dim]
    args = (
        kernel_array(output, "output"),
        kernel_array(query, "query"),
        kernel_array(key_pool, "key_pool"),
        kernel_array(value_pool, "value_pool"),
        kernel_array(block_tables.to(torch.int32), "block_tables"),
        kernel_array(seq_lens.to(torch.int32), "seq_lens"),
        np.float32(scale),
    )
    decode_kernel(head_dim)[(num_heads, batch_size), NUM_THREADS, launch_stream()](*args)
    return output
