"""The v1 paged-attention decode kernel: the source text's §4 loop on a GPU.

One thread block per (sequence $r$, query head $h$), $T$ threads each (``NUM_THREADS``). The
block walks the sequence's $L$ tokens in rounds of $T$ consecutive tokens; in a round, thread
``thread`` owns token $\\tau$ = round start + ``thread`` and finds it through the block table,
as §4's address formula does: logical block $j = \\lfloor \\tau / B \\rfloor$, physical block
$\\mathcal{T}_r[j]$, offset $o = \\tau \\bmod B$.
So the threads share out the tokens of each physical block, and the warps the blocks: with
$T = 128$ (four warps of 32) and $B = 32$, warp $w$ of a round reads exactly one physical block,
§4's "warps are assigned distinct physical blocks"; with $B = 16$ it reads two. After each round
the thread block updates the online softmax's running max ``m_prev``, running sum ``l_prev`` and
accumulator ``acc``, exactly as §4's loop does after each block, with the loop's names.

Shared memory holds what every thread reads: the query, the round's probabilities $e^{s - m}$
and physical block ids, and the accumulator (each thread owns output dimensions ``thread``,
``thread + T``, ...). Nothing is ever read at a position $\\ge L$: a NaN in an unused slot, or
-1 in an unused block-table entry, cannot reach the result.

vLLM's kernel computes the same thing in a different order: a *group* of threads shares one
key row (each thread a slice of ``head_dim``), so neighbouring threads read neighbouring
addresses, and it keeps all the scores in shared memory for a two-pass softmax. Here one thread
reads a whole key row and the softmax is §4's online one, which is simpler to follow.

Its CPU twin (``cuda_kernels/cpu/paged_attention.py``) differs in two steps. From an FP8 pool
each thread here decodes the bytes it reads (``element``); the twin decodes a whole row once
(``decoded_row``), since one of its iterations reads the row for every query head of the group.
And the twin prefetches the next round's rows: here the other warps in flight hide the wait
for a block the table jumps to, which a CPU core running one iteration cannot.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from numba import cuda, float32, int32
from numba.extending import overload

from cuda_kernels.block_reduce import REDUCTION, block_reductions
from cuda_kernels.decode_arguments import check_decode_inputs, decode_arguments, output_like
from cuda_kernels.fp8 import element, element_overload
from cuda_kernels.launch import NUM_THREADS, check_device, kernel_array, launch_stream
from minipaged.attention_call import attention_entry_point

overload(element, target="cuda")(element_overload)  # float32 or FP8 bytes, chosen at compile

NEG_INF = np.float32(-np.inf)
"""$-\\infty$ as a float32 constant: a Python float would make Numba compute in float64
(``.f64`` PTX instructions) wherever it meets a float32."""

ZERO = np.float32(0.0)
"""0 as a float32 constant, for the same reason as ``NEG_INF``."""


@functools.cache
def online_softmax(num_threads: int, reduction: str):
    """The device function all decode kernels share (v1 over a whole sequence, v2 over one
    partition): ``attend(q, acc, key_pool, value_pool, table, kv_head, start, end, scale)``.

    Attends the query ``q`` (``[head_dim]``, shared memory) to tokens ``start .. end - 1`` of
    the sequence whose block table row is ``table``, reading KV head ``kv_head``. On return,
    every thread holds the same ``m_prev`` $= m$ (the largest score) and ``l_prev``
    $= l = \\sum_\\tau e^{s_\\tau - m}$, and ``acc`` (``[head_dim]``, shared memory, zero on
    entry) holds $\\sum_\\tau e^{s_\\tau - m} v_\\tau$, so the attention output is ``acc / l``.
    The names are those of §4's loop (``paged_attention_decode_loop``). Needs ``start < end``.

    Never reads a slot at or past ``end``, nor ``table[j]`` for a block holding no token below
    ``end``: those may hold NaN or -1.

    FP8 pools arrive as bytes and are read through the decode table ``lut``
    (``cuda_kernels.fp8.element``); ``scale`` then includes the KV head's ``k_scale``, and the
    caller multiplies the output by its ``v_scale``.
    """
    block_max, block_sum = block_reductions(reduction)

    @cuda.jit(device=True)
    def attend(q, acc, key_pool, value_pool, table, kv_head, start, end, scale, lut):
        thread = cuda.threadIdx.x
        head_dim = q.shape[0]
        block_size = key_pool.shape[2]  # B
        # Shared so that every thread can weigh every token of the round by its probability and
        # find its value row: each thread fills its own entry, then all threads read them all.
        probs = cuda.shared.array(num_threads, float32)  # [T] p_curr = e^{s - m_curr} per token
        blocks = cuda.shared.array(num_threads, int32)  # [T] physical block T_r[j] of each token
        scratch = cuda.shared.array(num_threads, float32)  # [T] the reductions' workspace

        m_prev = NEG_INF
        l_prev = ZERO
        for first in range(start, end, num_threads):
            tau = first + thread  # this thread's token
            score = NEG_INF  # a thread past the end takes part in the reductions with e^{-inf} = 0
            if tau < end:
                block = table[tau // block_size]  # T_r[j], j = floor(tau / B)
                offset = tau % block_size  # o = tau mod B
                blocks[thread] = block
                score = ZERO
                for d in range(head_dim):
                    score += q[d] * element(key_pool[block, kv_head, offset, d], lut)
                score *= scale

            m_curr = max(m_prev, block_max(score, scratch))  # finite: token `first` is below `end`
            p_prev = math.exp(m_prev - m_curr)  # rescales what was summed under the old max
            p_curr = math.exp(score - m_curr)
            l_curr = p_prev * l_prev + block_sum(p_curr, scratch)
            probs[thread] = p_curr
            cuda.syncthreads()

            # Each thread owns output dimensions thread, thread + T, ...: no two write the same.
            tokens = min(num_threads, end - first)
            for d in range(thread, head_dim, num_threads):
                total = p_prev * acc[d]
                for i in range(tokens):
                    offset = (first + i) % block_size
                    total += probs[i] * element(value_pool[blocks[i], kv_head, offset, d], lut)
                acc[d] = total
            cuda.syncthreads()  # all reads of probs and blocks are done before the next round
            m_prev = m_curr
            l_prev = l_curr
        return m_prev, l_prev

    return attend


def check_num_threads(num_threads: int) -> None:
    """$T$ must be whole warps, and a power of two for the tree reduction."""
    if num_threads not in (32, 64, 128, 256, 512, 1024):
        raise ValueError(
            f"num_threads must be a power of two from 32 to 1024 (whole warps, and the tree "
            f"reduction halves it), got {num_threads!r}"
        )


@functools.cache
def decode_kernel(head_dim: int, num_threads: int = NUM_THREADS, reduction: str = REDUCTION):
    """The v1 kernel compiled for one ``head_dim`` and $T$ (they size its shared memory, like
    the template parameters of vLLM's kernel). Launch it on grid ``(num_heads, batch)`` with
    ``num_threads`` threads per block."""
    check_num_threads(num_threads)
    attend = online_softmax(num_threads, reduction)

    @cuda.jit
    def paged_attention_v1(
        out, query, key_pool, value_pool, block_tables, seq_lens, scale, k_scale, v_scale, lut
    ):
        """Thread block (h, r) writes ``out[r, h]``: attention of query head h of sequence r
        over its seq_lens[r] tokens, through block table row T_r = block_tables[r]."""
        head = cuda.blockIdx.x
        seq = cuda.blockIdx.y
        thread = cuda.threadIdx.x
        kv_head = head // (query.shape[1] // key_pool.shape[1])  # GQA: h // (N_Q / N_KV)
        # The query is read by every thread for every token: load it once, into shared memory.
        q = cuda.shared.array(head_dim, float32)  # [head_dim]
        acc = cuda.shared.array(head_dim, float32)  # [head_dim] sum of e^{s - m} v
        for d in range(thread, head_dim, num_threads):
            q[d] = query[seq, head, d]
            acc[d] = ZERO
        cuda.syncthreads()

        table = block_tables[seq]  # T_r
        pools = (key_pool, value_pool, table, kv_head)
        head_scale = scale * k_scale[kv_head]  # q . (s_k k) = s_k (q . k)
        _, l_prev = attend(q, acc, *pools, 0, seq_lens[seq], head_scale, lut)
        for d in range(thread, head_dim, num_threads):  # each thread reads back what it wrote
            out[seq, head, d] = acc[d] * (v_scale[kv_head] / l_prev)

    return paged_attention_v1


@attention_entry_point
def paged_attention_decode(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_size: int,
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention with the v1 kernel: same arguments and result as
    ``minipaged.attention.paged_attention_decode`` (float32 tensors, or FP8 pools with their
    per-KV-head ``k_scale`` and ``v_scale``; on the GPU, or on the CPU under the simulator).
    Returns ``[batch, num_heads, head_dim]``."""
    paged = (query, key_pool, value_pool, block_tables, seq_lens)
    check_decode_inputs(*paged, scale, block_size, check_device)
    batch_size, num_heads, head_dim = query.shape
    output = output_like(query)  # [batch, num_heads, head_dim]
    if batch_size == 0:
        return output
    inputs, fp8 = decode_arguments(*paged, scale, k_scale, v_scale, kernel_array)
    kernel = decode_kernel(head_dim)[(num_heads, batch_size), NUM_THREADS, launch_stream()]
    kernel(kernel_array(output, "output"), *inputs, *fp8)
    return output
