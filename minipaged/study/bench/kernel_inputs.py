"""The keys and values ``bench kernels`` times, laid out the four ways its paths read them:
shuffled through the block table (paged), in order (a contiguous cache, block table
$\\mathcal{T}_r = [rM, rM + 1, \\dots]$), in shuffled FP8 blocks, and as one contiguous tensor
for SDPA. Every layout holds the same values, so the paths' times differ only by how they
read them."""

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
    in_order: tuple  # the same keys and values, block table T_r = [r M, r M + 1, ...]
    fp8: tuple  # ``paged`` with FP8 pools; their scales in ``fp8_scales``
    fp8_scales: dict
    sdpa: tuple  # (q, k, v): [batch, N_KV, context, d_h] contiguous, for SDPA


def decode_inputs(batch: int, context: int, block_size: int, device: str, seed: int = 0):
    """Random decode inputs for one row: the same keys and values in shuffled blocks, in
    blocks laid out in order, in shuffled FP8 blocks, and contiguous for SDPA; on a CPU run
    all of them on 2 MiB pages (``huge_pages``), as a GPU maps its memory."""
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

    def contiguous(pool: torch.Tensor) -> torch.Tensor:
        # [batch, per_seq, N_KV, B, d_h] -> [batch, N_KV, per_seq * B, d_h], cut to the context
        blocks = pool[tables].transpose(1, 2)
        return pages(blocks.reshape(batch, kv_heads, per_seq * block_size, d_h)[:, :, :context])

    def quantized(pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = fp8.scale_for(pool.abs().amax(dim=(0, 2, 3)), FP8_DTYPE)  # [N_KV]
        return pages(fp8.quantize(pool, scale.view(-1, 1, 1), FP8_DTYPE)), scale

    rest = (seq_lens, d_h**-0.5, block_size)
    (key_fp8, k_scale), (value_fp8, v_scale) = quantized(key_pool), quantized(value_pool)
    return DecodeInputs(
        paged=(query, key_pool, value_pool, tables.to(torch.int32), *rest),
        # block r M + j of the in-order pools is block T_r[j] of the shuffled ones
        in_order=(query, pages(key_pool[tables.flatten()]), pages(value_pool[tables.flatten()]))
        + (in_order.to(torch.int32), *rest),
        fp8=(query, key_fp8, value_fp8, tables.to(torch.int32), *rest),
        fp8_scales={"k_scale": k_scale, "v_scale": v_scale},
        sdpa=(query.unsqueeze(2), contiguous(key_pool), contiguous(value_pool)),
    )
