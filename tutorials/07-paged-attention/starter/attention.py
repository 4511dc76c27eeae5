"""Exercise 07: paged attention decode in PyTorch, with the online softmax (source text §4).

Fill in each region marked ``# --- your code here ---``, then run

    minipaged exercises check 7

The names and signatures are those of ``minipaged.attention``, so the same checks grade both.
Shapes: ``query [batch, num_heads, head_dim]``; ``key_pool`` and ``value_pool``
``[num_blocks, num_kv_heads, B, head_dim]``; ``block_tables [batch, max_blocks]`` int32, padded
with -1 past each sequence's last block; ``seq_lens [batch]``. Both functions return
``[batch, num_heads, head_dim]``. Slots that hold no token may hold NaN: never read them.
"""

from __future__ import annotations

import torch
from torch import Tensor


def paged_attention_decode_loop(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
) -> Tensor:
    """§4's loop: for each sequence b, walk its M = ceil(L/B) logical blocks in order; gather
    block j's keys and values from physical block T_b[j] (only its first min(B, L - jB)
    tokens), and fold them into the running max m, running sum l and accumulator:

        m_curr = max(m_prev, max(scores))
        l_curr = exp(m_prev - m_curr) * l_prev + sum(exp(scores - m_curr))
        acc    = exp(m_prev - m_curr) * acc + exp(scores - m_curr) @ V_block

    The output is acc / l. Query head h reads KV head h // (num_heads / num_kv_heads)."""
    batch_size, num_heads, head_dim = query.shape
    group = num_heads // key_pool.shape[1]  # query heads per KV head
    output = torch.zeros_like(query)
    # --- your code here (about 25 lines) ---
    raise NotImplementedError("exercise 07: the block loop with the online softmax")


def paged_attention_decode(
    query: Tensor,
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    scale: float,
    block_size: int,
) -> Tensor:
    """The same result without a Python loop over blocks: gather every sequence's blocks
    through its table at once (``key_pool[table]``), mask positions >= L with -inf before
    one softmax, and keep masked keys and values out of the products (NaN * 0 is NaN)."""
    # --- your code here (about 15 lines) ---
    raise NotImplementedError("exercise 07: gather, mask, one softmax")


def _try_it() -> None:
    """``python attention.py``: both functions on a small batch laid out in scattered blocks
    (NaN in every unused slot, tables padded with -1), against attention computed here without
    any paging. Uses nothing of minipaged's: compare freely before the checks."""
    block_size, head_dim, lens = 4, 8, [5, 11]
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(len(lens), 4, head_dim, generator=gen)  # 4 query heads over 2 KV heads
    key_pool = torch.full((8, 2, block_size, head_dim), float("nan"))
    value_pool = torch.full_like(key_pool, float("nan"))
    tables = torch.tensor([[6, 1, -1], [3, 0, 7]], dtype=torch.int32)
    expected = torch.empty_like(query)
    for b, length in enumerate(lens):
        keys = torch.randn(2, length, head_dim, generator=gen)  # [num_kv_heads, L, head_dim]
        values = torch.randn(2, length, head_dim, generator=gen)
        for t in range(length):
            p, o = int(tables[b, t // block_size]), t % block_size
            key_pool[p, :, o], value_pool[p, :, o] = keys[:, t], values[:, t]
        k, v = keys.repeat_interleave(2, dim=0), values.repeat_interleave(2, dim=0)
        weights = torch.softmax(torch.einsum("hd,htd->ht", query[b], k) / head_dim**0.5, dim=-1)
        expected[b] = torch.einsum("ht,htd->hd", weights, v)
    args = (query, key_pool, value_pool, tables, torch.tensor(lens), head_dim**-0.5, block_size)
    for function in (paged_attention_decode_loop, paged_attention_decode):
        error = (function(*args) - expected).abs().max().item()  # NaN when a poison slot leaks
        print(f"{function.__name__}: max error {error:.2g}", "(ok)" if error < 1e-4 else "")


if __name__ == "__main__":
    _try_it()
