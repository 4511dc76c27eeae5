"""Paged attention cases for the peer tests, with the contiguous oracle they are judged by.

A case is the five tensors of DESIGN.md's signature: ``query [batch, num_heads, head_dim]``,
``key_pool`` and ``value_pool [num_blocks, num_kv_heads, block_size, head_dim]``,
``block_tables [batch, max_blocks]`` int32 (padded with -1) and ``seq_lens [batch]``. Every
slot no sequence reads is NaN, so an implementation that reads one returns NaN.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

TOLERANCE = dict(atol=1e-5, rtol=1e-4)


def make_case(seed, *, batch, num_heads, num_kv_heads, head_dim, block_size, lens, alias):
    """Random pools with every slot no sequence reads set to NaN, block tables drawn without
    replacement from a shuffled pool (sequences share blocks when ``alias``), and the query."""
    g = torch.Generator().manual_seed(seed)
    blocks_per_seq = [math.ceil(n / block_size) for n in lens]
    num_blocks = sum(blocks_per_seq) + 3
    order = torch.randperm(num_blocks, generator=g).tolist()
    tables, used = [], 0
    for r, m in enumerate(blocks_per_seq):
        if alias and r > 0 and m >= 1 and blocks_per_seq[0] >= 1:
            # the first block of every sequence is the first sequence's first block
            row = [tables[0][0]] + order[used : used + m - 1]
            used += m - 1
        else:
            row = order[used : used + m]
            used += m
        tables.append(row)
    shape = (num_blocks, num_kv_heads, block_size, head_dim)
    key_pool = torch.full(shape, float("nan"))
    value_pool = torch.full(shape, float("nan"))
    for r, row in enumerate(tables):
        for t in range(lens[r]):
            block, offset = row[t // block_size], t % block_size
            if alias and r > 0 and t < block_size and t < lens[0]:
                continue  # the shared block keeps the first sequence's values
            key_pool[block, :, offset] = torch.randn(num_kv_heads, head_dim, generator=g)
            value_pool[block, :, offset] = torch.randn(num_kv_heads, head_dim, generator=g)
    for r, row in enumerate(tables):
        for t in range(lens[r]):
            block, offset = row[t // block_size], t % block_size
            if torch.isnan(key_pool[block, :, offset]).any():
                key_pool[block, :, offset] = torch.randn(num_kv_heads, head_dim, generator=g)
                value_pool[block, :, offset] = torch.randn(num_kv_heads, head_dim, generator=g)
    max_blocks = max(blocks_per_seq)
    block_tables = torch.full((batch, max_blocks), -1, dtype=torch.int32)
    for r, row in enumerate(tables):
        block_tables[r, : len(row)] = torch.tensor(row, dtype=torch.int32)
    query = torch.randn(batch, num_heads, head_dim, generator=g)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    return query, key_pool, value_pool, block_tables, seq_lens


def contiguous_oracle(query, key_pool, value_pool, block_tables, seq_lens, scale, block_size):
    """Gather each sequence's K and V into ``[num_kv_heads, L, head_dim]`` and attend."""
    out = []
    num_heads, num_kv_heads = query.shape[1], key_pool.shape[1]
    for r in range(query.shape[0]):
        n = int(seq_lens[r])
        slots = [(int(block_tables[r, t // block_size]), t % block_size) for t in range(n)]
        k = torch.stack([key_pool[b, :, o] for b, o in slots], dim=1)
        v = torch.stack([value_pool[b, :, o] for b, o in slots], dim=1)
        group = num_heads // num_kv_heads
        k = k.repeat_interleave(group, dim=0)  # query head h reads KV head h // group
        v = v.repeat_interleave(group, dim=0)
        q = query[r].unsqueeze(1)  # [num_heads, 1, head_dim]
        out.append(F.scaled_dot_product_attention(q, k, v, scale=scale).squeeze(1))
    return torch.stack(out)
