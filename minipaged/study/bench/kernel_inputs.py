"""The keys and values ``bench kernels`` times, and the ways its paths read them: one pool
read through a shuffled block table (paged) and through the identity (in order: a contiguous
cache, $\\mathcal{T}_r = [rM, rM + 1, \\dots]$), shuffled FP8 blocks, and one contiguous tensor
for SDPA.

Paged and in order read the very same pool tensors, every block once: the same bytes at the
same addresses, on the same (huge or small) pages, so their times differ only by the order the
block table visits the blocks in, which is §4's claim. (Two copies of the pool, one laid out in
order, differed also by where the operating system placed each, on more or fewer huge pages:
paged ÷ in order then moved from 0.95 to 1.08 between runs of one row, far outside each run's
own interval; over one pool, three fresh processes agree to 0.003.) In order, sequence
$r$ reads blocks $rM \\dots rM + M - 1$; paged, the blocks its row of the shuffled table names:
the two paths attend over different keys, each checked against SDPA over its own."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minipaged import fp8, huge_pages, memory

SHAPE = memory.PRESETS["llama-3-8b"]

FP8_DTYPE = fp8.KV_CACHE_DTYPES["fp8_e4m3"]
"""The FP8 rows' pool dtype: e4m3, the format FP8 KV caches use."""


@dataclass(frozen=True)
class DecodeInputs:
    """One row's keys and values, laid out four ways, with the query and lengths they share."""

    paged: tuple  # paged_attention_decode's arguments, blocks shuffled through the table
    in_order: tuple  # the same pools, block table T_r = [r M, r M + 1, ...]
    fp8: tuple  # ``paged`` with FP8 pools; their scales in ``fp8_scales``
    fp8_scales: dict
    sdpa: tuple  # (q, k, v): [batch, N_KV, context, d_h] contiguous, paged's keys, for SDPA

    def sdpa_in_order(self) -> tuple:
        """SDPA's ``(q, k, v)`` over the keys and values the in-order path reads: its check,
        made when asked (untimed), not kept beside the row's other copies."""
        query, *pools, tables, seq_lens = self.in_order[:5]
        keys, values = (contiguous(pool, tables, int(seq_lens[0])) for pool in pools)
        return query.unsqueeze(2), keys, values


def contiguous(pool: torch.Tensor, tables: torch.Tensor, context: int) -> torch.Tensor:
    """The keys (or values) ``tables`` lays out in ``pool``, as SDPA reads them:
    [blocks, N_KV, B, d_h] -> [batch, N_KV, context, d_h]."""
    batch, per_seq = tables.shape
    _, kv_heads, block_size, d_h = pool.shape
    blocks = pool[tables.long()].transpose(1, 2)  # [batch, N_KV, per_seq, B, d_h]
    return blocks.reshape(batch, kv_heads, per_seq * block_size, d_h)[:, :, :context]


def decode_inputs(batch: int, context: int, block_size: int, device: str, seed: int = 0):
    """Random decode inputs for one row: one pool of keys and values with a shuffled and an
    in-order block table, its blocks in FP8, and the shuffled table's keys contiguous for SDPA;
    on a CPU run all of them on 2 MiB pages (``huge_pages``), as a GPU maps its memory."""
    pages = huge_pages.on_huge_pages if device == "cpu" else lambda tensor: tensor
    generator = torch.Generator().manual_seed(seed)
    heads, kv_heads, d_h = SHAPE.num_q_heads, SHAPE.num_kv_heads, SHAPE.head_dim
    per_seq = memory.num_logical_blocks(context, block_size)  # M blocks per sequence
    num_blocks = batch * per_seq
    pool_shape = (num_blocks, kv_heads, block_size, d_h)
    key_pool = pages(torch.randn(pool_shape, generator=generator).to(device))
    value_pool = pages(torch.randn(pool_shape, generator=generator).to(device))
    query = torch.randn(batch, heads, d_h, generator=generator).to(device)
    tables = torch.randperm(num_blocks, generator=generator).view(batch, per_seq).to(device)
    in_order = torch.arange(num_blocks, device=device).view(batch, per_seq)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)

    def quantized(pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = fp8.scale_for(pool.abs().amax(dim=(0, 2, 3)), FP8_DTYPE)  # [N_KV]
        return pages(fp8.quantize(pool, scale.view(-1, 1, 1), FP8_DTYPE)), scale

    rest, pools = (seq_lens, d_h**-0.5, block_size), (key_pool, value_pool)
    (key_fp8, k_scale), (value_fp8, v_scale) = quantized(key_pool), quantized(value_pool)
    return DecodeInputs(
        paged=(query, key_pool, value_pool, tables.to(torch.int32), *rest),
        in_order=(query, key_pool, value_pool, in_order.to(torch.int32), *rest),
        fp8=(query, key_fp8, value_fp8, tables.to(torch.int32), *rest),
        fp8_scales={"k_scale": k_scale, "v_scale": v_scale},
        sdpa=(query.unsqueeze(2), *(pages(contiguous(p, tables, context)) for p in pools)),
    )
