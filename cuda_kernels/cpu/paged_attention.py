"""The v1 paged-attention decode kernel's CPU twin: §4's loop, one ``prange`` iteration per
(sequence $r$, KV head).

Read it beside ``cuda_kernels/paged_attention.py``. The CUDA kernel's thread block (query head
$h$, sequence $r$) becomes iteration (sequence $r$, KV head $k$) of a parallel loop, which
attends the $N_Q / N_{KV}$ query heads $h = k \\cdot$ ``group`` $+ g$ that share KV head $k$. The
rounds are the same: $T$ consecutive tokens, token $\\tau$ = round start + ``thread``, found
through the block table as logical block $j = \\lfloor \\tau / B \\rfloor$, physical block
$\\mathcal{T}_r[j]$, offset $o = \\tau \\bmod B$. Where the CUDA threads compute their tokens'
scores at once and meet in a block reduction for the round's max and sum, the twin loops over
``thread`` and then over the round. After each round the online softmax's ``m_prev``,
``l_prev`` and ``acc`` move exactly as in §4's loop (``paged_attention_decode_loop``), with
its names.

What shared memory holds on the GPU (the query, the round's probabilities and block ids, the
accumulator) lives in small per-iteration arrays that stay in the core's cache. Three steps
differ. While it scores a round, the twin asks for the next round's key and value rows
(``cuda_kernels.cpu.prefetch``): a GPU hides the wait for a block the table sends it to with
its other warps, but a core running one iteration would wait at every jump to a new block.
And from an FP8 pool a CUDA thread decodes each byte as it reads it, through a table
(``element``), but the twin decodes a key or value row once into float32 (``decoded_row``),
by moving bits rather than through the table, before the query heads of its group read it,
so that the decoding and the loops over $d_h$ run in SIMD lanes. For the same reason the
round's $e^{s_\\tau - m}$ are taken by an exp LLVM can vectorize (``simd_exp``), not by one
call to the C library's ``expf`` per query head and token. And where a CUDA thread
handles one token, the twin takes two at a time what a core would otherwise load twice: it
scores a key row against two query heads in one pass over $d_h$, and adds two tokens' value
rows to ``acc`` in one pass (the comments in ``attend`` say why). Nothing is
read at a position $\\ge L$: a NaN in an unused slot, or -1 in an unused table entry, cannot
reach the result.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from cuda_kernels.cpu.addresses import array_at
from cuda_kernels.cpu.launch import (
    FASTMATH,
    NUM_THREADS,
    check_device,
    kernel_array,
    on_torch_threads,
)
from cuda_kernels.cpu.prefetch import LINE_BYTES, prefetch
from cuda_kernels.cpu.simd_exp import exp
from cuda_kernels.decode_arguments import (
    by_fields,
    check_decode_inputs,
    check_values,
    layer_arguments,
    output_like,
    per_call_tensors,
)
from cuda_kernels.fp8 import DecodeFields, decoded_row
from minipaged.attention_call import ResultHoldsNaN, attention_entry_point

NEG_INF = np.float32(-np.inf)
ZERO = np.float32(0.0)


@njit(cache=True, fastmath=FASTMATH)
def attend(q, acc, key_pool, value_pool, table, kv_head, start, end, scale, fields):
    """The CUDA kernels' ``attend`` for a group of query heads: attends ``q``
    (``[group, head_dim]``, the query heads reading ``kv_head``) to tokens ``start .. end - 1``
    of the sequence whose block table row is ``table``. On return ``m_prev[g]`` is head g's
    largest score, ``l_prev[g]`` $= \\sum_\\tau e^{s_\\tau - m}$ and ``acc[g]`` (zero on entry)
    $= \\sum_\\tau e^{s_\\tau - m} v_\\tau$, so the output is ``acc / l_prev``. Needs
    ``start < end``; never reads a slot at or past ``end``. FP8 pools are bytes, decoded a row
    at a time by the format's bit ``fields`` (``cuda_kernels.fp8.decoded_row``) into their
    values over ``fields.multiplier``; ``scale`` includes the KV head's ``k_scale`` and the
    multiplier, and the caller multiplies the output by its ``v_scale`` and the multiplier."""
    group, head_dim = q.shape
    block_size = key_pool.shape[2]  # B
    probs = np.empty((group, NUM_THREADS), np.float32)  # [group, T] scores, then p_curr
    blocks = np.empty(NUM_THREADS, np.int64)  # [T] physical block T_r[j] of each token
    halves = np.empty(head_dim, np.int16)  # [head_dim] an FP8 row's bytes as float16 bits
    row = np.empty(head_dim, np.float32)  # [head_dim] an FP8 key or value row, decoded
    second = np.empty(head_dim, np.float32)  # [head_dim] the value row of a pass's 2nd token
    m_prev = np.full(group, NEG_INF, np.float32)
    l_prev = np.zeros(group, np.float32)
    for first in range(start, end, NUM_THREADS):
        tokens = min(NUM_THREADS, end - first)
        for thread in range(tokens):  # what CUDA thread `thread` computes for its token
            tau = first + thread
            ahead = tau + NUM_THREADS  # this thread's token of the next round: fetch it now
            if ahead < end:
                later = table[ahead // block_size], kv_head, ahead % block_size
                for d in range(0, head_dim, LINE_BYTES // key_pool.itemsize):
                    prefetch(key_pool[later], d)
                    prefetch(value_pool[later], d)
            block = table[tau // block_size]  # T_r[j], j = floor(tau / B)
            blocks[thread] = block
            key = decoded_row(
                key_pool[block, kv_head, tau % block_size], fields, halves, row
            )  # o = tau mod B
            # the query heads' scores, two heads a pass: each element of the key row is
            # loaded once for both, and the two sums are independent chains of multiply-adds
            # that the core runs side by side (FP8 twin 6-7% faster, paired rounds, one thread)
            for g in range(0, group - 1, 2):
                score, next_score = ZERO, ZERO
                for d in range(head_dim):
                    score += q[g, d] * key[d]
                    next_score += q[g + 1, d] * key[d]
                probs[g, thread] = score * scale
                probs[g + 1, thread] = next_score * scale
            if group % 2:  # an odd group (one head, as without GQA) has its last head left
                score = ZERO
                for d in range(head_dim):
                    score += q[group - 1, d] * key[d]
                probs[group - 1, thread] = score * scale

        for g in range(group):  # the block reductions, one query head at a time
            # m_curr = max(m_prev, the round's scores), by compare and select: ndarray.max()
            # tests each value for NaN and stops at one, a branch per value that kept it out of
            # SIMD lanes (28 against 8 ns for 32 scores; both twins 1-4% faster, paired rounds,
            # one thread). A NaN score is passed over here, but its e^{s - m} is NaN and
            # reaches l and acc, so the row still ends NaN
            m_curr = m_prev[g]
            for thread in range(tokens):
                score = probs[g, thread]
                m_curr = score if score > m_curr else m_curr
            p_prev = math.exp(m_prev[g] - m_curr)  # rescales what was summed under the old max
            total = ZERO
            for thread in range(tokens):  # the round's exps at once, in SIMD lanes (simd_exp)
                p_curr = exp(probs[g, thread] - m_curr)
                probs[g, thread] = p_curr
                total += p_curr
            l_curr = p_prev * l_prev[g] + total
            for d in range(head_dim):
                acc[g, d] *= p_prev
            m_prev[g] = m_curr
            l_prev[g] = l_curr

        # acc += p_curr v over the round, two tokens a pass: each element of acc is loaded
        # and stored once per two value rows, not once per row. Those loads and stores, more
        # than the multiply-adds, set this loop's pace (a core stores one 256-bit register a
        # cycle): the FP8 twin ran 10% faster for it, fp32 1-4% (paired rounds, one thread)
        for thread in range(0, tokens - 1, 2):
            tau = first + thread
            value = decoded_row(
                value_pool[blocks[thread], kv_head, tau % block_size], fields, halves, row
            )
            next_value = decoded_row(
                value_pool[blocks[thread + 1], kv_head, (tau + 1) % block_size],
                fields,
                halves,
                second,
            )
            for g in range(group):
                p_curr, p_next = probs[g, thread], probs[g, thread + 1]
                for d in range(head_dim):
                    acc[g, d] += p_curr * value[d] + p_next * next_value[d]
        if tokens % 2:  # a round of odd length (a sequence or partition ends) has one token left
            thread = tokens - 1
            offset = (first + thread) % block_size
            value = decoded_row(value_pool[blocks[thread], kv_head, offset], fields, halves, row)
            for g in range(group):
                p_curr = probs[g, thread]
                for d in range(head_dim):
                    acc[g, d] += p_curr * value[d]
    return m_prev, l_prev


@njit(cache=True)
def row_holds_nan(row) -> bool:
    """Whether ``row`` (1-d) holds a NaN: the only value not equal to itself, which the
    twins' ``FASTMATH`` keeps, as it leaves out LLVM's leave to assume no NaN."""
    found = False
    for x in row:
        found |= x != x
    return found


UNFIT = -1
"""What the v1 twin returns, in place of its count of NaN rows, when a length or a table row
fails ``tables_fit``: it has then read no key, and its caller runs the contract's checks of
those values, whose refusal says what is wrong."""


@njit(cache=True)
def tables_fit(block_tables, seq_lens, block_size, num_blocks) -> bool:
    """Whether every sequence r can be read: $L_r \\ge 1$, a table row $\\mathcal{T}_r$ of at
    least $\\lceil L_r / B \\rceil$ entries, and those entries blocks of the pool
    (``0 .. num_blocks - 1``). The same rules as ``decode_arguments.check_values``, run here
    inside the kernel, so a call whose layout passed before (``check_decode_inputs``) pays no
    Python for its values: from cold caches, reading them into Python lists cost a call about
    0.06 ms (on the machine this was written on, a call over 16 tokens took about 0.5 ms)."""
    for r in range(seq_lens.shape[0]):
        seq_len = seq_lens[r]
        if seq_len < 1 or block_tables.shape[1] * block_size < seq_len:
            return False
        for j in range((seq_len + block_size - 1) // block_size):  # T_r[0 .. ceil(L_r/B) - 1]
            if block_tables[r, j] < 0 or block_tables[r, j] >= num_blocks:
                return False
    return True


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def paged_attention_v1(
    sizes,
    out,
    query,
    key_pool,
    value_pool,
    block_tables,
    seq_lens,
    scale,
    k_scale,
    v_scale,
    decoder,
):
    """Iteration (r, k) writes ``out[r, h]`` for the query heads h of KV head k: attention
    over sequence r's seq_lens[r] tokens, through block table row T_r = block_tables[r].
    Returns how many rows ``out[r, h]`` hold a NaN, each looked at as it is written, while
    it is in the core's cache (``attention_call.ResultHoldsNaN``); or ``UNFIT``, having read
    no key, when a length or a table row cannot be read (``tables_fit``).

    As a CUDA kernel is given device pointers, this one is given the four tensors that are new
    on every call (``out``, ``query``, ``block_tables``, ``seq_lens``) as addresses, with
    ``sizes`` = (batch, $N_Q$, $d_h$, the tables' width), and views them as arrays in its first
    lines (``cuda_kernels.cpu.addresses`` says why); the pools, made once, come as arrays."""
    batch_size, num_heads, head_dim, width = sizes
    out = array_at(out, (batch_size, num_heads, head_dim), np.float32)
    query = array_at(query, (batch_size, num_heads, head_dim), np.float32)
    block_tables = array_at(block_tables, (batch_size, width), np.int32)
    seq_lens = array_at(seq_lens, (batch_size,), np.int32)
    num_blocks, num_kv_heads, block_size = key_pool.shape[:3]
    if not tables_fit(block_tables, seq_lens, block_size, num_blocks):
        return UNFIT
    group = num_heads // num_kv_heads  # GQA: query head h reads KV head h // group
    fields = DecodeFields(*decoder)  # passed as a plain tuple (decode_arguments.by_fields)
    nan_rows = 0
    for item in prange(batch_size * num_kv_heads):
        seq, kv_head = item // num_kv_heads, item % num_kv_heads
        heads = slice(kv_head * group, (kv_head + 1) * group)
        q = query[seq, heads]  # [group, head_dim]
        acc = np.zeros((group, head_dim), np.float32)  # sum of e^{s - m} v per query head
        table = block_tables[seq]  # T_r
        pools = (key_pool, value_pool, table, kv_head)
        # q . (s_k k) = s_k (q . k), and the rows come decoded over fields.multiplier
        head_scale = scale * (k_scale[kv_head] * fields.multiplier)
        _, l_prev = attend(q, acc, *pools, 0, seq_lens[seq], head_scale, fields)
        out_scale = v_scale[kv_head] * fields.multiplier  # sum p (s_v v) = s_v sum p v
        for g in range(group):
            out[seq, kv_head * group + g] = acc[g] * (out_scale / l_prev[g])
            if row_holds_nan(out[seq, kv_head * group + g]):
                nan_rows += 1
    return nan_rows


@attention_entry_point(finds_nan=True)
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
    """Decode attention with the v1 twin: same arguments and result as
    ``minipaged.attention.paged_attention_decode`` (float32 CPU tensors, or FP8 pools with
    their per-KV-head ``k_scale`` and ``v_scale``). Returns ``[batch, num_heads, head_dim]``."""
    paged = (query, key_pool, value_pool, block_tables, seq_lens)
    check_decode_inputs(*paged, scale, block_size, check_device, kernel_checks_values=True)
    output = output_like(query)  # [batch, num_heads, head_dim]
    if query.shape[0] == 0:
        return output
    # by address, so each is contiguous, of the kernel's dtype, and held here for the call;
    # the caller's own tables and lengths stay as they are for check_values' refusal below
    queries, tables, lengths = per_call_tensors(query, block_tables, seq_lens)
    sizes = (*queries.shape, tables.shape[1])
    per_call = (output, queries, tables, lengths)
    out, query_at, tables_at, lens_at = (tensor.data_ptr() for tensor in per_call)
    keys, values, scale, fp8 = layer_arguments(
        key_pool, value_pool, scale, k_scale, v_scale, kernel_array, by_fields
    )
    kernel = on_torch_threads(paged_attention_v1)
    arguments = (out, query_at, keys, values, tables_at, lens_at, scale, *fp8)
    nan_rows = kernel(sizes, *arguments)
    if nan_rows == UNFIT:  # the contract's refusal of the values says what is wrong
        check_values(block_tables, seq_lens, block_size, key_pool.shape[0])
        raise AssertionError("tables_fit refused values that check_values accepts")
    if nan_rows:
        raise ResultHoldsNaN(output)  # the entry point refuses an overflow, or returns it
    return output
