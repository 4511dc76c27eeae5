"""The loop scales the caller's query in place, once, instead of every score.

Fails: loop_one_block
"""

from __future__ import annotations

import torch


def paged_attention_decode_loop(
    query, key_pool, value_pool, block_tables, seq_lens, scale, block_size
):
    batch_size, num_heads, head_dim = query.shape
    num_kv_heads = key_pool.shape[1]
    group = num_heads // num_kv_heads
    output = torch.zeros_like(query)
    query *= scale  # scale once, not once per block
    for b in range(batch_size):
        length = int(seq_lens[b])
        q = query[b].float()  # [H, d]
        m = torch.full((num_heads,), float("-inf"))
        ell = torch.zeros(num_heads)
        acc = torch.zeros(num_heads, head_dim)
        num_blocks = (length + block_size - 1) // block_size
        for j in range(num_blocks):
            p = int(block_tables[b, j])
            n = min(block_size, length - j * block_size)
            k = key_pool[p, :, :n].float().repeat_interleave(group, dim=0)  # [H, n, d]
            v = value_pool[p, :, :n].float().repeat_interleave(group, dim=0)
            s = torch.einsum("hd,hnd->hn", q, k)
            m_new = torch.maximum(m, s.max(dim=1).values)
            correction = torch.exp(m - m_new)
            e = torch.exp(s - m_new[:, None])
            ell = correction * ell + e.sum(dim=1)
            acc = correction[:, None] * acc + torch.einsum("hn,hnd->hd", e, v)
            m = m_new
        output[b] = (acc / ell[:, None]).to(query.dtype)
    return output


def paged_attention_decode(query, key_pool, value_pool, block_tables, seq_lens, scale, block_size):
    batch_size, num_heads, head_dim = query.shape
    num_kv_heads = key_pool.shape[1]
    group = num_heads // num_kv_heads
    tables = block_tables.long().clamp(min=0)
    max_blocks = tables.shape[1]
    k = key_pool[tables].float()  # [batch, max_blocks, N_KV, B, d]
    v = value_pool[tables].float()
    k = k.permute(0, 2, 1, 3, 4).reshape(
        batch_size, num_kv_heads, max_blocks * block_size, head_dim
    )
    v = v.permute(0, 2, 1, 3, 4).reshape(
        batch_size, num_kv_heads, max_blocks * block_size, head_dim
    )
    positions = torch.arange(max_blocks * block_size)
    valid = positions[None, :] < seq_lens.long()[:, None]  # [batch, T]
    k = torch.where(valid[:, None, :, None], k, torch.zeros(()))
    v = torch.where(valid[:, None, :, None], v, torch.zeros(()))
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = torch.einsum("bhd,bhtd->bht", query.float(), k) * scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.einsum("bht,bhtd->bhd", w, v).to(query.dtype)
