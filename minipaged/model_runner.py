"""Runs one scheduled step: the block copies the block manager decided on, then one forward pass
of the model over every scheduled sequence (prefills and decodes in the same batch)."""

from __future__ import annotations

from array import array

import torch
from torch import Tensor

from minipaged.attention import NO_BLOCK
from minipaged.attention_call import engine_attention
from minipaged.attention_probe import AttentionProbe, AttentionRecord, Row
from minipaged.backend import PagedBatch, split_rows
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
        self.probe: AttentionProbe | None = None

    def record_attention(self) -> None:
        """From the next step on, record what each step's attention read and computed
        (``minipaged.attention_probe``, and its memory cost); ``take_attention`` hands it out."""
        self.probe = AttentionProbe()

    def take_attention(self) -> tuple[AttentionRecord, ...] | None:
        """The last step's records, one per scheduled row; None while nothing is recorded."""
        return None if self.probe is None else self.probe.take()

    @torch.inference_mode()
    def execute(self, plan: SchedulerOutput) -> Tensor | None:
        """Run ``plan``; return the logits ``[len(plan.scheduled), vocab]`` of each scheduled
        row's last query (its sequence's last token: ``ScheduledSeq.samples``), or None when
        nothing is scheduled.

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
        observe = None
        if self.probe is not None:
            rows = [
                Row(i.seq.seq_id, tuple(i.block_table), i.query_positions) for i in plan.scheduled
            ]
            observe = self.probe.observer(rows, self.kv_cache, self.model.config.head_dim**-0.5)
        with engine_attention():  # the scale is the model's: no overflow check per layer
            return self.model.forward(tokens, positions, self.kv_cache, batch, last_token, observe)

    def prepare(self, plan: SchedulerOutput) -> tuple[Tensor, Tensor, PagedBatch]:
        """The step's inputs as tensors: tokens and positions ``[N]`` (each row's
        ``query_positions``, in batch order) and their ``PagedBatch``.

        Sequence $b$'s token at position $t$ goes to slot
        $\\mathcal{T}_b[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$ (``memory.slot``).
        Everything is listed in Python first, then copied into two tensors, one of int64 and
        one of int32, whose slices are the batch's tensors: a step's inputs are a few hundred
        integers, and each tensor made costs more than listing them all, so a step pays for
        two whatever it runs (and, on a GPU, for two copies to the device).
        """
        block_size = self.kv_cache.block_size
        scheduled = plan.scheduled
        width = max(len(item.block_table) for item in scheduled)
        tokens: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        query_lens: list[int] = []
        tables: list[int] = []  # the padded block tables, row after row
        for item in scheduled:
            token_ids, table = item.seq.token_ids, item.block_table
            computed = item.query_positions  # the sequence's last num_query_tokens positions
            tokens += token_ids[computed.start : computed.stop]
            positions += computed
            slots += [table[t // block_size] * block_size + t % block_size for t in computed]
            seq_lens.append(computed.stop)  # tokens in the cache once this step has written
            query_lens.append(item.num_query_tokens)
            tables += table
            tables += [NO_BLOCK] * (width - len(table))

        n, batch_size = len(tokens), len(scheduled)
        longs = integers(tokens + positions + slots, "q").to(self.device)  # [3N] int64
        ints = integers(seq_lens + query_lens + tables, "i").to(self.device)  # int32
        batch = PagedBatch(
            slot_mapping=longs[2 * n :],  # [N] int64
            block_tables=ints[2 * batch_size :].view(batch_size, width),  # [batch, width] int32
            seq_lens=ints[:batch_size],  # [batch] int32
            query_lens=ints[batch_size : 2 * batch_size],  # [batch] int32
            block_size=block_size,
            split=split_rows(query_lens, self.device),
            backend=self.backend,
        )
        return longs[:n], longs[n : 2 * n], batch


def integers(values: list[int], typecode: str) -> Tensor:
    """``values`` (not empty) as a 1-D CPU tensor of int64 (``typecode`` ``"q"``) or int32
    (``"i"``), through an ``array``: ``torch.tensor`` inspects a list element by element and
    takes several times longer for the few hundred integers of a step."""
    dtype = torch.int64 if typecode == "q" else torch.int32
    return torch.frombuffer(array(typecode, values), dtype=dtype)
