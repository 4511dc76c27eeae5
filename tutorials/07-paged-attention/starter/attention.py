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
