"""Runs one scheduled step: the block copies the block manager decided on, then one forward pass
of the model over every scheduled sequence (prefills and decodes in the same batch)."""

from __future__ import annotations

import torch
from torch import Tensor

from minipaged.attention import NO_BLOCK
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
        tokens, positions, batch = self.prepare(plan)
        # A prefill needs only its last token's logits; a decode step's rows are all last.
        last_token = None
        if len(tokens) > len(plan.scheduled):
            last_token = torch.cumsum(batch.query_lens, 0) - 1  # [batch]
        return self.model.forward(tokens, positions, self.kv_cache, batch, last_token)

    def prepare(self, plan: SchedulerOutput) -> tuple[Tensor, Tensor, PagedBatch]:
        """The step's inputs as tensors: tokens and positions ``[N]`` (each sequence's last
        ``num_query_tokens`` tokens, in batch order) and their ``PagedBatch``.

        The Python side only lists what the plan already says; the slot mapping is one
        gather over the padded block tables, slot $= \\mathcal{T}_b[\\lfloor t/B \\rfloor]
        \\cdot B + (t \\bmod B)$ (``memory.slot``) for every token $t$ of sequence $b$, so a
        step costs a fixed handful of tensor operations however many sequences it runs.
        """
        block_size = self.kv_cache.block_size
        scheduled = plan.scheduled
        seq_lens, query_lens, tokens, positions, rows = [], [], [], [], []
        for b, item in enumerate(scheduled):
            seq_len, query_len = len(item.seq.token_ids), item.num_query_tokens
            seq_lens.append(seq_len)
            query_lens.append(query_len)
            tokens += item.seq.token_ids[seq_len - query_len :]
            positions += range(seq_len - query_len, seq_len)
            rows += [b] * query_len
        width = max(len(item.block_table) for item in scheduled)
        tables = [
            item.block_table + [NO_BLOCK] * (width - len(item.block_table)) for item in scheduled
        ]

        device = self.device
        block_tables = torch.tensor(tables, dtype=torch.int32, device=device)  # [batch, width]
        position = torch.tensor(positions, device=device)  # [N]
        block = block_tables[torch.tensor(rows, device=device), position // block_size]  # T_b[j]
        batch = PagedBatch(
            slot_mapping=block * block_size + position % block_size,  # [N] int64
            block_tables=block_tables,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            query_lens=torch.tensor(query_lens, dtype=torch.int32, device=device),
            block_size=block_size,
            backend=self.backend,
        )
        return torch.tensor(tokens, device=device), position, batch
