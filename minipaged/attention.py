"""Reference paged attention in PyTorch: the source text's §4, and the oracle for every kernel.

Token $t$ of sequence $r$ lives in physical block $\\mathcal{T}_r[\\lfloor t/B \\rfloor]$ at
offset $t \\bmod B$ of the pools ``[num_blocks, num_kv_heads, B, head_dim]``. Each function here
reads keys and values through the block table and returns exactly what contiguous attention over
the sequence's first ``seq_len`` tokens returns:

- ``paged_attention_decode_loop``: §4's pseudo-code line by line (online softmax), to read;
- ``paged_attention_decode``: the vectorized version the model uses: the gather of
  ``minipaged.gather`` (each sequence's blocks, copied into token order through its table),
  then one softmax over all positions;
- ``paged_attention_decode_partitions``, ``combine_partitions`` and
  ``paged_attention_decode_partitioned``: §4's cross-partition reduction, the reference for
  the v2 kernel's two stages;
- ``paged_attention_prefill``: several queries per sequence with a causal mask;
- ``paged_attention_tree``: the nodes of a token tree, each seeing the prefix and its
  ancestors (speculative decoding's verify pass, ``minipaged.speculative``).

The kernels in ``cuda_kernels`` compute the same results; ``minipaged.backend`` chooses between
them and this module, which imports no kernel: it is what every other path is tested against.

Grouped-query attention: query head $h$ reads KV head $h \\div (N_Q / N_{KV})$, the mapping of
Hugging Face's ``repeat_kv`` (``repeat_interleave`` on the head axis). $N_Q$ is ``num_heads``
everywhere, and ``group`` is $N_Q / N_{KV}$.

FP8 pools (``minipaged.fp8``): every function takes keyword-only ``k_scale`` and ``v_scale``
``[num_kv_heads]`` and turns bytes into float32 at one point, right after reading them through
the block table (the loop's block read, ``gather_kv`` for the others): $k = s_k \\hat{k}$.

Guarantee shared by all paths: no key or value at a position $\\ge$ ``seq_len``, and no block
named by an unused block-table entry, influences the result, even when it holds NaN or inf.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from minipaged.attention_call import attention_entry_point
from minipaged.contract import check_attention_inputs, check_partition_size
from minipaged.fp8 import dequantize_unchecked
from minipaged.gather import gather_kv, per_kv_head, thread_workspace

NO_BLOCK = -1
"""Pads block tables past a sequence's last block. Never read: attention masks those positions."""


@attention_entry_point
def paged_attention_decode_loop(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """§4's decode pseudo-code, line by line: one query per sequence, one logical block at a
    time, with the online softmax's running max ``m_prev``, running sum ``l_prev`` and
    accumulator ``acc`` (the kernels use the same names).

    Invariant after block $j$: ``acc / l_prev`` is softmax attention over tokens
    $0 \\ldots \\min((j+1)B, L) - 1$. Returns ``[batch, num_heads, head_dim]``.
    """
    group = check_attention_inputs(
        query, key_pool, value_pool, block_tables, seq_lens, block_size, scale=scale
    )
    batch_size, num_heads, head_dim = query.shape
    output = torch.zeros_like(query)

    for b in range(batch_size):
        seq_len = int(seq_lens[b])
        num_blocks = (seq_len + block_size - 1) // block_size
        q = query[b]  # [num_heads, head_dim]

        # Accumulators for online softmax
        m_prev = torch.full((num_heads, 1), -float("inf"), dtype=query.dtype, device=query.device)
        l_prev = torch.zeros((num_heads, 1), dtype=query.dtype, device=query.device)
        acc = torch.zeros((num_heads, head_dim), dtype=query.dtype, device=query.device)

        for blk_idx in range(num_blocks):
            phys_block_id = int(block_tables[b, blk_idx])
            tokens_in_block = min(block_size, seq_len - blk_idx * block_size)

            # Gather physical block KV tensors: [num_kv_heads, tokens, head_dim]
            k_block = key_pool[phys_block_id, :, :tokens_in_block, :]
            v_block = value_pool[phys_block_id, :, :tokens_in_block, :]
            # FP8 pools: bytes times the KV head's scale, in float32 (the model's dtype: as is)
            k_block = dequantize_unchecked(k_block, per_kv_head(k_scale, 3))
            v_block = dequantize_unchecked(v_block, per_kv_head(v_scale, 3))

            # The source text's einsum "hd,ktd->hkt" pairs every query head with every KV head,
            # which is only right when num_kv_heads == 1. Query head h must read KV head
            # h // group, so give each query head its own copy of its KV head first.
            k_block = k_block.repeat_interleave(group, dim=0)  # [num_heads, tokens, head_dim]
            v_block = v_block.repeat_interleave(group, dim=0)  # [num_heads, tokens, head_dim]

            # Compute logits: S = (q * K^T) * scale
            scores = torch.einsum("hd,htd->ht", q, k_block) * scale  # [num_heads, tokens]

            # Online softmax reduction across blocks
            m_curr = torch.maximum(m_prev, torch.max(scores, dim=-1, keepdim=True)[0])
            p_prev = torch.exp(m_prev - m_curr)  # rescales what was summed under the old max
            p_curr = torch.exp(scores - m_curr)

            l_curr = p_prev * l_prev + torch.sum(p_curr, dim=-1, keepdim=True)
            acc = acc * p_prev + torch.einsum("ht,htd->hd", p_curr, v_block)

            m_prev = m_curr
            l_prev = l_curr

        output[b] = acc / l_prev

    return output


@attention_entry_point
def paged_attention_decode(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """Vectorized decode: gather every sequence's blocks through its table (``gather_kv``),
    then attend with one softmax over the valid positions. Same arguments and result as
    ``paged_attention_decode_loop``; returns ``[batch, num_heads, head_dim]``.

    Each KV head is read once for its whole group of query heads: the query is viewed as
    ``[num_kv_heads, batch, group, head_dim]`` rather than the keys copied ``group`` times."""
    group = check_attention_inputs(
        query, key_pool, value_pool, block_tables, seq_lens, block_size, scale=scale
    )
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    paged = (key_pool, value_pool, block_tables, seq_lens, block_size)
    keys, values, valid = gather_kv(*paged, **scales, workspace=thread_workspace())
    batch_size, num_heads, head_dim = query.shape
    q = query.view(batch_size, num_heads // group, group, head_dim).transpose(0, 1)
    # [N_KV, batch, group, head_dim]: softmax over each sequence's valid positions only
    out = F.scaled_dot_product_attention(q, keys, values, valid[None, :, None, :], scale=scale)
    return out.transpose(0, 1).reshape(query.shape)  # head h = kv_head * group + g


def combine_partitions(m_k: Tensor, l_k: Tensor, o_k: Tensor) -> Tensor:
    """§4's cross-partition reduction: $O = \\sum_k \\frac{l_k e^{m_k - m}}{l} O_k$ with
    $m = \\max_k m_k$ and $l = \\sum_k l_k e^{m_k - m}$.

    ``m_k`` and ``l_k`` are ``[..., P]`` (partition $k$'s max score and sum of
    $e^{s - m_k}$); ``o_k`` is ``[..., P, head_dim]`` (its normalized output). A partition with
    $l_k = 0$ holds no token and contributes nothing, whatever its $m_k$ and $O_k$ hold. Each
    row needs at least one non-empty partition. Returns ``[..., head_dim]``.
    """
    non_empty = l_k > 0  # [..., P]
    if not bool(non_empty.any(dim=-1).all()):
        raise ValueError(
            "combine_partitions needs at least one partition with l_k > 0 in every row: "
            "attention over zero tokens is undefined"
        )
    m = torch.where(non_empty, m_k, -float("inf")).amax(dim=-1, keepdim=True)  # [..., 1]
    weights = torch.where(non_empty, l_k * torch.exp(m_k - m), 0.0)  # l_k e^{m_k - m}
    l = weights.sum(dim=-1, keepdim=True)  # noqa: E741  (the source text's l)
    o_k = torch.where(non_empty[..., None], o_k, 0.0)
    return (weights[..., None] * o_k).sum(dim=-2) / l


@attention_entry_point
def paged_attention_decode_partitions(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
    partition_size: int,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The first stage of vLLM's v2 decode kernel: split each sequence's tokens into
    $P = \\lceil \\max_b L_b / \\text{partition\\_size} \\rceil$ partitions of whole blocks and
    compute each one's $(m_k, l_k, O_k)$ on its own.

    Returns ``m_k`` and ``l_k`` ``[batch, num_heads, P]`` and ``o_k``
    ``[batch, num_heads, P, head_dim]`` (vLLM's ``max_logits``, ``exp_sums``, ``tmp_out``).
    A partition past a sequence's end holds no token and gets exactly $m_k = -\\infty$,
    $l_k = 0$, $O_k = 0$: never NaN."""
    group = check_attention_inputs(
        query, key_pool, value_pool, block_tables, seq_lens, block_size, scale=scale
    )
    check_partition_size(partition_size, block_size)
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    paged = (key_pool, value_pool, block_tables, seq_lens, block_size)
    keys, values, valid = gather_kv(*paged, **scales, workspace=thread_workspace())
    num_kv_heads, batch_size, max_len, head_dim = keys.shape
    num_partitions = -(-max_len // partition_size)
    pad = num_partitions * partition_size - max_len
    keys = F.pad(keys, (0, 0, 0, pad))  # [N_KV, batch, P * partition_size, head_dim]
    values = F.pad(values, (0, 0, 0, pad))
    valid = F.pad(valid, (0, pad), value=False)  # [batch, P * partition_size]

    by_partition = (num_kv_heads, batch_size, group, num_partitions, partition_size)
    scores = grouped_scores(query, keys, valid, group, scale).view(by_partition)
    values = values.view(num_kv_heads, batch_size, 1, num_partitions, partition_size, head_dim)
    m_k = scores.amax(dim=-1)  # [N_KV, batch, group, P]; -inf for an empty partition
    # Shift an empty partition's scores by 0, not by m_k = -inf: -inf - (-inf) would be NaN.
    shift = torch.where(torch.isfinite(m_k), m_k, 0.0)
    p_curr = torch.exp(scores - shift[..., None])  # [N_KV, batch, group, P, partition_size]
    l_k = p_curr.sum(dim=-1)  # [N_KV, batch, group, P]
    acc = (p_curr[..., None, :] @ values).squeeze(-2)  # [N_KV, batch, group, P, head_dim]
    o_k = torch.where(l_k[..., None] > 0, acc / l_k[..., None], 0.0)

    def by_head(tensor: Tensor) -> Tensor:  # [N_KV, batch, group, ...] -> [batch, N_Q, ...]
        return tensor.transpose(0, 1).flatten(1, 2)

    return by_head(m_k), by_head(l_k), by_head(o_k)


@attention_entry_point
def paged_attention_decode_partitioned(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
    partition_size: int,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """Decode as vLLM's v2 kernel does it: ``paged_attention_decode_partitions``, then
    ``combine_partitions``. Same result as ``paged_attention_decode``."""
    args = (query, key_pool, value_pool, block_tables, seq_lens, scale, block_size)
    partitions = paged_attention_decode_partitions(
        *args, partition_size, k_scale=k_scale, v_scale=v_scale
    )
    return combine_partitions(*partitions)


@attention_entry_point
def paged_attention_prefill(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    query_lens: Tensor,
    scale: float,
    block_size: int,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """Attention for several new tokens per sequence (a prompt, a recomputation after
    preemption, or the suffix after a prefix-cache hit).

    ``query`` is ``[N, num_heads, head_dim]``: the sequences' queries concatenated in batch
    order, $N = \\sum_b$ ``query_lens[b]``. Sequence $b$'s queries are its last ``query_lens[b]``
    positions out of ``seq_lens[b]`` tokens already in the cache, and the query at position $t$
    attends to cache positions $0 \\ldots t$ (causal). Returns ``[N, num_heads, head_dim]``.
    """
    paged = (key_pool, value_pool, block_tables, seq_lens)
    group = check_attention_inputs(query, *paged, block_size, query_lens, scale=scale)
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    # [N_KV, batch, max_len, d_h], in this thread's workspace: used up before this returns
    keys, values, _ = gather_kv(*paged, block_size, **scales, workspace=thread_workspace())
    _, num_heads, head_dim = query.shape
    output = torch.empty_like(query)
    start = 0
    lens = zip(seq_lens.tolist(), query_lens.tolist(), strict=True)
    for b, (seq_len, query_len) in enumerate(lens):
        rows = slice(start, start + query_len)
        # Written out rather than scaled_dot_product_attention, whose CPU kernel took twice as
        # long for prompts of 20-250 tokens at head_dim 32. Query head h = kv_head * group + g:
        # each KV head meets its group's queries at once.
        q = query[rows].view(query_len, num_heads // group, group, head_dim).permute(1, 2, 0, 3)
        k = keys[:, b, None, :seq_len]  # [N_KV, 1, seq_len, head_dim]
        v = values[:, b, None, :seq_len]
        scores = (q @ k.transpose(-1, -2)) * scale  # [N_KV, group, query_len, seq_len]
        # Query i sits at position t = seq_len - query_len + i and sees cache positions 0..t.
        positions = torch.arange(seq_len - query_len, seq_len, device=query.device)
        sees = torch.arange(seq_len, device=query.device)[None, :] <= positions[:, None]
        scores.masked_fill_(~sees, -float("inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [N_KV, group, query_len, head_dim]
        output[rows] = out.permute(2, 0, 1, 3).reshape(query_len, num_heads, head_dim)
        start += query_len
    return output


def grouped_scores(query: Tensor, keys: Tensor, valid: Tensor, group: int, scale: float) -> Tensor:
    """Scores ``[num_kv_heads, batch, group, max_len]`` of ``query [batch, num_heads,
    head_dim]`` against ``keys [num_kv_heads, batch, max_len, head_dim]``, $-\\infty$ where not
    ``valid``. Query head $h$ = ``kv_head * group + g`` meets its KV head's keys without a
    copy of them per query head."""
    batch_size, num_heads, head_dim = query.shape
    q = query.view(batch_size, num_heads // group, group, head_dim).transpose(0, 1)
    scores = (q @ keys.transpose(-1, -2)) * scale  # [num_kv_heads, batch, group, max_len]
    return scores.masked_fill_(~valid[None, :, None, :], -float("inf"))


@attention_entry_point
def paged_attention_tree(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    prefix_lens: Tensor,
    query_lens: Tensor,
    scale: float,
    block_size: int,
    *,
    tree_mask: Tensor,
    node_slots: Tensor,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> Tensor:
    """Attention for the nodes of token trees (speculative decoding's verify pass, §5).

    Sequence $b$'s ``query_lens[b]`` queries are the nodes of its tree, in ``query``'s row
    order. Node $i$ sees the first ``prefix_lens[b]`` = $P$ cache positions, read through
    $\\mathcal{T}_b$, and node $j$'s key and value, read at slot ``node_slots[j]``, iff
    ``tree_mask[i, j]`` (``[N, N]`` bool, the ancestors mask $M$: $j$ on the path from the root
    to $i$). Scores of node $i$: $q_i \\cdot k_t$ for $t < P$ and $q_i \\cdot k_j$ where
    $M_{ij}$, one softmax over both. A chain ($M$ lower triangular) is a causal prefill.
    FP8 pools are read with the per-KV-head ``k_scale`` and ``v_scale``, as in ``gather_kv``.
    Returns ``[N, num_heads, head_dim]``."""
    n = query.shape[0]
    if tree_mask.shape != (n, n) or node_slots.shape != (n,):
        raise ValueError(
            f"tree_mask must be [N, N] and node_slots [N] for N = {n} queries, got "
            f"{tuple(tree_mask.shape)} and {tuple(node_slots.shape)}"
        )
    firsts = torch.cumsum(query_lens, 0) - query_lens  # each tree's root row
    paged = (key_pool, value_pool, block_tables, prefix_lens)
    group = check_attention_inputs(query[firsts.long()], *paged, block_size, scale=scale)
    scales = {"k_scale": k_scale, "v_scale": v_scale}
    # [N_KV, batch, max_len, d_h], in this thread's workspace: used up before this returns
    keys, values, _ = gather_kv(*paged, block_size, **scales, workspace=thread_workspace())
    node_slots = node_slots.long()
    at = (node_slots // block_size, slice(None), node_slots % block_size)
    node_keys = dequantize_unchecked(key_pool[at], per_kv_head(k_scale, 2))  # [N, N_KV, head_dim]
    node_values = dequantize_unchecked(value_pool[at], per_kv_head(v_scale, 2))
    output = torch.empty_like(query)
    lens = zip(firsts.tolist(), prefix_lens.tolist(), query_lens.tolist(), strict=True)
    for b, (start, prefix_len, count) in enumerate(lens):
        rows = slice(start, start + count)
        k = torch.cat((keys[:, b, :prefix_len], node_keys[rows].transpose(0, 1)), dim=1)
        v = torch.cat((values[:, b, :prefix_len], node_values[rows].transpose(0, 1)), dim=1)
        k = k.repeat_interleave(group, dim=0)  # [num_heads, P + count, head_dim]
        v = v.repeat_interleave(group, dim=0)
        prefix = torch.ones(count, prefix_len, dtype=torch.bool, device=query.device)
        sees = torch.cat((prefix, tree_mask[rows, rows]), dim=1)  # [count, P + count]
        q = query[rows].transpose(0, 1)  # [num_heads, count, head_dim]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=sees, scale=scale)
        output[rows] = out.transpose(0, 1)
    return output
