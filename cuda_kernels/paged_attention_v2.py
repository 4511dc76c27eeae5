"""The v2 paged-attention decode kernels: §4's partitioned reduction, in two launches.

A long sequence gives v1 a single thread block per head that walks every token alone. v2 cuts
each sequence into partitions of ``partition_size`` tokens (whole blocks of $B$) and gives each
partition $k$ its own thread block, so a long sequence keeps many blocks busy:

1. ``partitions_kernel``, grid ``(num_heads, batch, P)``: thread block $(h, r, k)$ runs
   the v1 loop over partition $k$ only and writes its max score $m_k$, its exp-sum
   $l_k = \\sum_{\\tau \\in k} e^{s_\\tau - m_k}$ and its normalized output $O_k$ (vLLM's
   ``max_logits``, ``exp_sums`` and ``tmp_out``);
2. ``reduce_kernel``, grid ``(num_heads, batch)``: combines them with §4's formula
   $O = \\sum_k \\frac{l_k e^{m_k - m}}{l} O_k$, $m = \\max_k m_k$, $l = \\sum_k l_k e^{m_k - m}$.

$P = \\lceil \\max_r L_r / \\text{partition\\_size} \\rceil$ for the whole batch, so a shorter
sequence has empty partitions past its end: they write $m_k = -\\infty$, $l_k = 0$, $O_k = 0$
(never NaN) and the reduction skips every partition with $l_k = 0$.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from numba import cuda, float32

from cuda_kernels.block_reduce import REDUCTION
from cuda_kernels.decode_arguments import check_decode_inputs, decode_arguments, output_like
from cuda_kernels.launch import NUM_THREADS, check_device, kernel_array, launch_stream
from cuda_kernels.paged_attention import NEG_INF, ZERO, check_num_threads, online_softmax
from minipaged.attention_call import attention_entry_point
from minipaged.contract import check_partition_size


@functools.cache
def partitions_kernel(head_dim: int, num_threads: int = NUM_THREADS, reduction: str = REDUCTION):
    """Stage 1 compiled for one ``head_dim`` and $T$. Launch on grid
    ``(num_heads, batch, P)`` with ``num_threads`` threads per block."""
    check_num_threads(num_threads)
    attend = online_softmax(num_threads, reduction)

    @cuda.jit
    def paged_attention_v2_partitions(
        max_logits,  # [batch, num_heads, P] m_k
        exp_sums,  # [batch, num_heads, P] l_k
        tmp_out,  # [batch, num_heads, P, head_dim] O_k
        query,
        key_pool,
        value_pool,
        block_tables,
        seq_lens,
        scale,
        partition_size,
        k_scale,
        v_scale,
        lut,
    ):
        """Thread block (h, r, k) attends query head h of sequence r to the tokens of its
        partition k, [k * partition_size, (k + 1) * partition_size) cut at seq_lens[r]."""
        head = cuda.blockIdx.x
        seq = cuda.blockIdx.y
        part = cuda.blockIdx.z
        thread = cuda.threadIdx.x
        start = part * partition_size
        end = min(start + partition_size, seq_lens[seq])
        if start >= end:  # the whole thread block returns here: no barrier is left waiting
            if thread == 0:
                max_logits[seq, head, part] = NEG_INF
                exp_sums[seq, head, part] = ZERO
            for d in range(thread, head_dim, num_threads):
                tmp_out[seq, head, part, d] = ZERO
            return

        kv_head = head // (query.shape[1] // key_pool.shape[1])  # GQA: h // (N_Q / N_KV)
        q = cuda.shared.array(head_dim, float32)  # [head_dim] read by every thread: shared
        acc = cuda.shared.array(head_dim, float32)  # [head_dim] sum of e^{s - m_k} v
        for d in range(thread, head_dim, num_threads):
            q[d] = query[seq, head, d]
            acc[d] = ZERO
        cuda.syncthreads()

        table = block_tables[seq]  # T_r
        pools = (key_pool, value_pool, table, kv_head)
        head_scale = scale * k_scale[kv_head]  # q . (s_k k) = s_k (q . k)
        m_k, l_k = attend(q, acc, *pools, start, end, head_scale, lut)
        if thread == 0:
            max_logits[seq, head, part] = m_k
            exp_sums[seq, head, part] = l_k
        for d in range(thread, head_dim, num_threads):
            tmp_out[seq, head, part, d] = acc[d] * (v_scale[kv_head] / l_k)

    return paged_attention_v2_partitions


@cuda.jit
def reduce_kernel(out, max_logits, exp_sums, tmp_out):
    """Stage 2, grid ``(num_heads, batch)``: thread block (h, r) writes ``out[r, h]`` from the
    P partitions' (m_k, l_k, O_k) with §4's formula. Each thread computes output dimensions
    ``thread``, ``thread + T``, ...; P is small (L / partition_size), so each thread loops over
    it itself."""
    head = cuda.blockIdx.x
    seq = cuda.blockIdx.y
    num_partitions = max_logits.shape[2]

    m = NEG_INF  # m = max_k m_k over partitions holding a token (l_k > 0)
    for k in range(num_partitions):
        if exp_sums[seq, head, k] > ZERO:
            m = max(m, max_logits[seq, head, k])
    l = ZERO  # noqa: E741  l = sum_k l_k e^{m_k - m}
    for k in range(num_partitions):
        if exp_sums[seq, head, k] > ZERO:
            l += exp_sums[seq, head, k] * math.exp(max_logits[seq, head, k] - m)  # noqa: E741

    for d in range(cuda.threadIdx.x, out.shape[2], cuda.blockDim.x):
        total = ZERO
        for k in range(num_partitions):
            if exp_sums[seq, head, k] > ZERO:
                weight = exp_sums[seq, head, k] * math.exp(max_logits[seq, head, k] - m)
                total += weight * tmp_out[seq, head, k, d]
        out[seq, head, d] = total / l


@attention_entry_point
def paged_attention_decode_v2(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_size: int,
    partition_size: int = 512,
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention with the v2 kernels: same arguments and result as
    ``minipaged.attention.paged_attention_decode_partitioned`` (and so as
    ``paged_attention_decode``). ``partition_size`` must be a positive
    multiple of ``block_size``. FP8 pools take their ``k_scale`` and ``v_scale``. Returns
    ``[batch, num_heads, head_dim]``."""
    paged = (query, key_pool, value_pool, block_tables, seq_lens)
    check_decode_inputs(*paged, scale, block_size, check_device)
    check_partition_size(partition_size, block_size)
    batch_size, num_heads, head_dim = query.shape
    output = output_like(query)  # [batch, num_heads, head_dim]
    if batch_size == 0:
        return output
    num_partitions = -(-int(seq_lens.max()) // partition_size)  # P
    max_logits = query.new_empty(batch_size, num_heads, num_partitions)  # [batch, num_heads, P]
    exp_sums = torch.empty_like(max_logits)  # [batch, num_heads, P]
    tmp_out = query.new_empty(batch_size, num_heads, num_partitions, head_dim)
    inputs, fp8 = decode_arguments(*paged, scale, k_scale, v_scale, kernel_array)
    stage_one = (
        kernel_array(max_logits, "max_logits"),
        kernel_array(exp_sums, "exp_sums"),
        kernel_array(tmp_out, "tmp_out"),
        *inputs,
        np.int32(partition_size),
        *fp8,
    )
    stage_two = (kernel_array(output, "output"), *stage_one[:3])  # out, m_k, l_k, O_k
    stream = launch_stream()
    grid = (num_heads, batch_size, num_partitions)
    partitions_kernel(head_dim)[grid, NUM_THREADS, stream](*stage_one)
    reduce_kernel[grid[:2], NUM_THREADS, stream](*stage_two)
    return output
