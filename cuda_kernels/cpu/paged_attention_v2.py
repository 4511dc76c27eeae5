"""The v2 decode kernels' CPU twins: §4's partitioned reduction, in two parallel loops.

Read it beside ``cuda_kernels/paged_attention_v2.py``:

1. ``paged_attention_v2_partitions``: iteration (sequence $r$, KV head, partition $k$) runs
   the v1 twin's ``attend`` over partition $k$ only and writes each of its query heads'
   $m_k$, $l_k$ and $O_k$ (CUDA: thread block $(h, r, k)$);
2. ``reduce_kernel``: iteration (sequence $r$, query head $h$) combines them with §4's formula
   $O = \\sum_k \\frac{l_k e^{m_k - m}}{l} O_k$ (CUDA: thread block $(h, r)$).

A partition past a sequence's end writes $m_k = -\\infty$, $l_k = 0$, $O_k = 0$, and the
reduction skips every partition with $l_k = 0$.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from cuda_kernels.cpu.launch import (
    FASTMATH,
    check_device,
    kernel_array,
    on_torch_threads,
)
from cuda_kernels.cpu.paged_attention import NEG_INF, ZERO, attend, row_holds_nan
from cuda_kernels.decode_arguments import (
    by_fields,
    check_decode_inputs,
    decode_arguments,
    output_like,
)
from cuda_kernels.fp8 import DecodeFields
from minipaged.attention_call import ResultHoldsNaN, attention_entry_point
from minipaged.contract import check_partition_size


@njit(parallel=True, cache=True, fastmath=FASTMATH)
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
    decoder,
):
    """Iteration (r, k_v, p) attends the query heads of KV head k_v in sequence r to the
    tokens of partition p, [p * partition_size, (p + 1) * partition_size) cut at seq_lens[r]."""
    batch_size, num_heads, head_dim = query.shape
    num_kv_heads = key_pool.shape[1]
    num_partitions = max_logits.shape[2]
    group = num_heads // num_kv_heads  # GQA: query head h reads KV head h // group
    fields = DecodeFields(*decoder)  # passed as a plain tuple (decode_arguments.by_fields)
    for item in prange(batch_size * num_kv_heads * num_partitions):
        seq = item // (num_kv_heads * num_partitions)
        kv_head = (item // num_partitions) % num_kv_heads
        part = item % num_partitions
        start = part * partition_size
        end = min(start + partition_size, seq_lens[seq])
        heads = slice(kv_head * group, (kv_head + 1) * group)
        if start >= end:  # a partition past the sequence's end holds no token
            max_logits[seq, heads, part] = NEG_INF
            exp_sums[seq, heads, part] = ZERO
            tmp_out[seq, heads, part] = ZERO
        else:
            q = query[seq, heads]  # [group, head_dim]
            acc = np.zeros((group, head_dim), np.float32)  # sum of e^{s - m_k} v per head
            table = block_tables[seq]  # T_r
            pools = (key_pool, value_pool, table, kv_head)
            # q . (s_k k) = s_k (q . k), and the rows come decoded over fields.multiplier
            head_scale = scale * (k_scale[kv_head] * fields.multiplier)
            m_k, l_k = attend(q, acc, *pools, start, end, head_scale, fields)
            out_scale = v_scale[kv_head] * fields.multiplier  # sum p (s_v v) = s_v sum p v
            for g in range(group):
                head = kv_head * group + g
                max_logits[seq, head, part] = m_k[g]
                exp_sums[seq, head, part] = l_k[g]
                tmp_out[seq, head, part] = acc[g] * (out_scale / l_k[g])


@njit(parallel=True, cache=True, fastmath=FASTMATH, error_model="numpy")
def reduce_kernel(out, max_logits, exp_sums, tmp_out):
    """Iteration (r, h) writes ``out[r, h]`` from the P partitions' (m_k, l_k, O_k) with
    §4's formula. Returns how many rows ``out[r, h]`` hold a NaN, as the v1 twin does.

    A partition whose $l_k$ is NaN (a NaN query or key, or logits that overflowed) is
    skipped like an empty one, so a head whose every $l_k$ is NaN divides by $l = 0$. Under
    Numba's ``error_model="numpy"`` that gives NaN, as the CUDA kernel's division does, and the
    row is counted; under its default (Python's) it raised ``ZeroDivisionError`` instead of
    giving NaN back for NaN in the caller's data."""
    batch_size, num_heads, num_partitions = max_logits.shape
    nan_rows = 0
    for item in prange(batch_size * num_heads):
        seq, head = item // num_heads, item % num_heads
        m = NEG_INF  # m = max_k m_k over partitions holding a token (l_k > 0)
        for k in range(num_partitions):
            if exp_sums[seq, head, k] > ZERO:
                m = max(m, max_logits[seq, head, k])
        l = ZERO  # noqa: E741  l = sum_k l_k e^{m_k - m}
        for k in range(num_partitions):
            if exp_sums[seq, head, k] > ZERO:
                l += exp_sums[seq, head, k] * math.exp(max_logits[seq, head, k] - m)  # noqa: E741

        for d in range(out.shape[2]):
            total = ZERO
            for k in range(num_partitions):
                if exp_sums[seq, head, k] > ZERO:
                    weight = exp_sums[seq, head, k] * math.exp(max_logits[seq, head, k] - m)
                    total += weight * tmp_out[seq, head, k, d]
            out[seq, head, d] = total / l
        if row_holds_nan(out[seq, head]):
            nan_rows += 1
    return nan_rows


@attention_entry_point(finds_nan=True)
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
    """Decode attention with the v2 twins: same arguments and result as
    ``cuda_kernels.paged_attention_decode_v2`` and
    ``minipaged.attention.paged_attention_decode_partitioned`` (float32 CPU tensors, or FP8
    pools with their ``k_scale`` and ``v_scale``). Returns ``[batch, num_heads, head_dim]``."""
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
    inputs, fp8 = decode_arguments(*paged, scale, k_scale, v_scale, kernel_array, by_fields)
    stage_one = (
        kernel_array(max_logits, "max_logits"),
        kernel_array(exp_sums, "exp_sums"),
        kernel_array(tmp_out, "tmp_out"),
        *inputs,
        np.int64(partition_size),
        *fp8,
    )
    on_torch_threads(paged_attention_v2_partitions)(*stage_one)
    reduce = on_torch_threads(reduce_kernel)
    if reduce(kernel_array(output, "output"), *stage_one[:3]):  # out, m_k, l_k, O_k
        raise ResultHoldsNaN(output)  # the entry point refuses an overflow, or returns it
    return output
