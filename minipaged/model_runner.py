"""Runs one scheduled step: the block copies the block manager decided on, then one forward
pass of the model over every scheduled sequence (prefills and decodes in the same batch)."""

from __future__ import annotations

import torch
from torch import Tensor

from minipaged.backend import PagedBatch
from minipaged.kv_cache import KVCache
from minipaged.model import Llama
from minipaged.scheduler import SchedulerOutput


class ModelRunner:
    """Turns a scheduler plan into tensors: runs its block copies on the ``KVCache``, then one
    forward pass with the slot mapping and block tables of every scheduled sequence."""

    def __init__(self, model: Llama, kv_cache: KVCache, backend: str = "torch") -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.backend = backend
        self.device = kv_cache.device

    @torch.inference_mode()
    def execute(self, plan: SchedulerOutput) -> Tensor | None:
        """Run ``plan``; return the logits ``[len(plan.scheduled), vocab]`` of each scheduled
        sequence's last token, or None when nothing is scheduled.

        The copies run first and in this order: swap-outs before anything can overwrite the
        device blocks they free, swap-ins, then copy-on-write copies before the forward pass
        writes the new token into the copy (§5).
        """
        self.kv_cache.swap_out(plan.blocks_to_swap_out)
        self.kv_cache.swap_in(plan.blocks_to_swap_in)
        self.kv_cache.copy_blocks(plan.blocks_to_copy)
        if not plan.scheduled:
            return None

        tokens: list[int] = []
        positions: list[int] = []
        for item in plan.scheduled:
            length = len(item.seq.token_ids)
            first = length - item.num_query_tokens
            tokens += item.seq.token_ids[first:]
            positions += range(first, length)
        batch = PagedBatch.from_lists(
            block_tables=[item.block_table for item in plan.scheduled],
            seq_lens=[len(item.seq.token_ids) for item in plan.scheduled],
            query_lens=[item.num_query_tokens for item in plan.scheduled],
            block_size=self.kv_cache.block_size,
            backend=self.backend,
            device=self.device,
        )
        query_lens = batch.query_lens.to(torch.int64)
        last_token = torch.cumsum(query_lens, 0) - 1  # each sequence's last row in the batch
        return self.model.forward(
            torch.tensor(tokens, device=self.device),
            torch.tensor(positions, device=self.device),
            self.kv_cache,
            batch,
            logits_index=last_token,
        )
