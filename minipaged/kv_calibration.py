"""Choosing the FP8 KV-cache scales: one calibration pass when the model loads.

vLLM stores FP8 keys and values with a fixed scale per layer: 1.0 unless the checkpoint ships
scales calibrated offline. A scale of 1 is safe for a model whose keys and values stay well
inside FP8's range and wasteful otherwise; a model's keys can reach hundreds (and e4m3 stops at
448). Here the scales are calibrated when ``LLM`` loads the model: one prefill of a fixed text
(``CALIBRATION_TEXT``) through a float cache, then, per layer and KV head, the largest key and
value magnitude $a$ becomes the scale $s = 2a / \\max$ (``fp8.scale_for``).

Why at load and not from each prompt's first write: the scales must stay fixed while the cache
lives. Bytes written under one scale would change meaning under another, and a scale chosen
by whichever request came first would make one request's output depend on another's. A fixed
text and a fixed model give the same scales every time: runs are reproducible.
"""

from __future__ import annotations

import torch
from torch import Tensor

from minipaged import fp8
from minipaged.backend import PagedBatch
from minipaged.kv_cache import KVCache
from minipaged.model import Llama
from minipaged.tokenizer import Tokenizer

CALIBRATION_TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views of such "
    "a man may be on his first entering a neighbourhood, this truth is so well fixed in the "
    "minds of the surrounding families, that he is considered the rightful property of some "
    "one or other of their daughters."
)
"""The opening of *Pride and Prejudice*: ordinary English for the calibration prefill."""


def calibration_tokens(model: Llama, tokenizer: Tokenizer | None) -> list[int]:
    """``CALIBRATION_TEXT``'s token ids; without a tokenizer, 64 ids drawn with a fixed seed.
    Never longer than the model's context."""
    config = model.config
    if tokenizer is not None:
        token_ids = tokenizer.encode(CALIBRATION_TEXT)
    else:
        generator = torch.Generator().manual_seed(0)
        token_ids = torch.randint(config.vocab_size, (64,), generator=generator).tolist()
    return token_ids[: config.max_position_embeddings]


@torch.inference_mode()
def calibrate_kv_scales(
    model: Llama, token_ids: list[int], dtype: torch.dtype, block_size: int = 16
) -> tuple[Tensor, Tensor]:
    """The scales ``k_scale`` and ``v_scale`` ``[num_layers, num_kv_heads]`` for an FP8 cache
    of ``dtype``: prefill ``token_ids`` as one sequence into a float cache of the model's
    dtype, then ``fp8.scale_for`` of each layer's and KV head's largest magnitude. The keys
    are measured after RoPE, as the cache stores them. ``token_ids`` holds at least one id,
    else ``ValueError`` (an empty cache of 0 blocks was refused in its own words); keys or
    values that are NaN or infinite (a model whose weights hold one) are a ``ValueError``
    naming the first layer and head, never a NaN scale."""
    if not len(token_ids):
        raise ValueError(
            "calibrate_kv_scales needs token ids to measure keys and values on, got none; pass "
            "calibration_tokens(model, tokenizer), a fixed text the model reads"
        )
    config = model.config
    param = next(model.parameters())
    num_tokens = len(token_ids)
    num_blocks = -(-num_tokens // block_size)
    cache = KVCache(
        config.num_hidden_layers,
        num_blocks,
        config.num_key_value_heads,
        block_size,
        config.head_dim,
        dtype=param.dtype,
        device=param.device,
    )
    batch = PagedBatch.from_lists(
        [list(range(num_blocks))], [num_tokens], block_size, [num_tokens], device=param.device
    )
    tokens = torch.tensor(token_ids, device=param.device)
    positions = torch.arange(num_tokens, device=param.device)
    model.forward(tokens, positions, cache, batch, torch.tensor([num_tokens - 1]))

    def amax(
        pools: list[Tensor], what: str
    ) -> Tensor:  # [N_L, blocks, N_KV, B, d_h] -> [N_L, N_KV]
        largest = torch.stack(pools).abs().amax(dim=(1, 3, 4))
        # a NaN or inf here would be a NaN or inf scale for every value of its head
        bad = (~torch.isfinite(largest)).nonzero().tolist()
        if bad:
            layer, head = bad[0]
            raise ValueError(
                f"the FP8 scales cannot be calibrated: layer {layer}, KV head {head}'s {what} "
                f"hold {largest[layer, head].item()} after the calibration prefill, so the "
                "model's weights hold NaN or inf; check the checkpoint, or run it with "
                "kv_cache_dtype='auto'"
            )
        return largest

    return (
        fp8.scale_for(amax(cache.key, "keys"), dtype),
        fp8.scale_for(amax(cache.value, "values"), dtype),
    )
