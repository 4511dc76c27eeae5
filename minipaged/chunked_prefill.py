"""Chunked prefill: a step's token budget, shared by decodes and pieces of prompts.

Without it, a step computes each admitted prompt whole: a prompt of $L$ tokens costs one step
$L$ tokens of compute, and every running sequence waits that long for its next token. With it
(vLLM V1's scheduler, Sarathi's "chunked prefills"), a step computes at most
``max_num_batched_tokens`` tokens, $N_{\\max}$, spent in this order
(``minipaged.scheduler.Scheduler.schedule``):

1. every running decode takes one token (the budget is at least ``max_num_seqs``, so they
   always fit);
2. each partly prefilled request continues with a chunk of what is left;
3. waiting requests are admitted with a chunk of what is left after that.

A chunk is at most ``long_prefill_token_threshold`` tokens when that is set, so one long
prompt cannot take a whole step's budget from the prompts behind it.

What changes for the paged cache (§3): a request holds blocks for the tokens computed so far
only, $\\lceil t/B \\rceil$ after $t$ of its prompt's tokens, and takes the next chunk's
blocks when that chunk is scheduled (``BlockManager.extend``). A chunk boundary inside a block
is the common case: the next chunk writes the rest of that block first. Attention for a chunk
(§4) has several queries at positions $t_0 \\ldots t_0 + c - 1$, each reading every earlier
position through the block table, the earlier chunks' included, and causal inside the chunk
(``minipaged.attention.paged_attention_prefill``). Only the chunk that reaches the last token
produces logits worth sampling (``ScheduledSeq.samples``).

This module holds the chunk rule and the two events the scheduler records while chunking is
on: ``PrefillChunk`` (who computed which tokens) and ``StepBudget`` (how the step's budget was
spent). It imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from minipaged.events import Event, SeqId

if TYPE_CHECKING:
    from minipaged.block_manager import BlockManager
    from minipaged.sequence import Sequence


def chunk_size(remaining: int, left: int, width: int = 1, cap: int = 0) -> int:
    """Tokens per sequence the next chunk of a request computes: its ``remaining`` prompt
    tokens, at most what the budget has ``left`` shared by its ``width`` sequences (a request
    recomputed after preemption may have several, which move together), and at most ``cap``
    when that is set (vLLM's ``long_prefill_token_threshold``). 0 when the budget cannot give
    each sequence a token."""
    size = min(remaining, left // width)
    return min(size, cap) if cap else size


@dataclass(frozen=True, slots=True)
class PrefillChunk(Event):
    """Sequence ``seq`` computed prompt tokens ``first`` to ``first + num_tokens - 1`` of its
    ``total`` this step: chunk ``index`` of ``num_chunks`` (the count if the chunks to come
    are this one's size); it holds ``num_blocks`` blocks, $\\lceil t/B \\rceil$ for the
    $t$ tokens computed once this chunk is written."""

    kind: ClassVar[str] = "prefill-chunk"

    seq: SeqId
    first: int
    num_tokens: int
    total: int
    index: int
    num_chunks: int
    num_blocks: int

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset({self.seq})

    def narrate(self) -> str:
        last = self.first + self.num_tokens - 1
        then = "its last: it samples" if last == self.total - 1 else "no token sampled yet"
        return (
            f"seq {self.seq} prefills tokens {self.first}–{last} of {self.total} (chunk "
            f"{self.index} of {self.num_chunks}), {self.num_blocks} "
            f"block{'' if self.num_blocks == 1 else 's'} allocated; {then}"
        )


def chunk_event(seq: Sequence, positions: range, num_blocks: int) -> PrefillChunk:
    """The ``PrefillChunk`` of ``seq`` computing ``positions``, its ``seq.num_chunks``-th
    chunk, with ``num_blocks`` blocks once written."""
    total, index = len(seq.token_ids), seq.num_chunks
    after = -(-(total - positions.stop) // len(positions))  # chunks to come, of this size
    chunk = (seq.seq_id, positions.start, len(positions), total, index, index + after)
    return PrefillChunk(*chunk, num_blocks)


@dataclass(frozen=True, slots=True)
class StepBudget(Event):
    """How one step spent its token budget of ``budget`` tokens: one token for each of the
    ``decodes``, then ``chunks``, (sequence, tokens) pairs, in the order they were given."""

    kind: ClassVar[str] = "step-budget"

    budget: int
    decodes: tuple[SeqId, ...]
    chunks: tuple[tuple[SeqId, int], ...]

    @property
    def used(self) -> int:
        return len(self.decodes) + sum(tokens for _, tokens in self.chunks)

    def seq_ids(self) -> frozenset[SeqId]:
        return frozenset(self.decodes) | {seq for seq, _ in self.chunks}

    def narrate(self) -> str:
        parts = []
        if self.decodes:
            seqs = ", ".join(str(seq) for seq in self.decodes)
            parts.append(f"{len(self.decodes)} decode (seq {seqs})")
        parts += [f"seq {seq} prefills {tokens}" for seq, tokens in self.chunks]
        spent = "; ".join(parts) or "nothing"
        return (
            f"token budget {self.budget}: {spent}; {self.budget - self.used} left"
            " (decodes first, then prompts in arrival order)"
        )


CHUNK_EVENTS: tuple[type[Event], ...] = (PrefillChunk, StepBudget)
"""The events of this module, for traces to read (``minipaged.trace.EVENT_TYPES``)."""


def room_for(bm: BlockManager, seqs: list[SeqId], num_tokens: int) -> int:
    """The most of ``num_tokens`` more tokens (each) that ``seqs``' tables can take now: the
    rest of each last block, plus the free device blocks shared among them."""
    free_each = bm.device.num_free // len(seqs)
    fits = [
        (table.num_blocks + free_each) * bm.block_size - table.num_tokens
        for table in (bm.table(seq) for seq in seqs)
    ]
    return min(num_tokens, *fits)


def extend(bm: BlockManager, seq: Sequence, end: int) -> list[tuple[int, int]]:
    """Reserve the slots of ``seq``'s tokens from its table's length up to ``end`` (a prefill
    chunk) one by one, through ``append_slot``: a fresh block each time the last one is full
    (§3, on demand), so the table holds $\\lceil t/B \\rceil$ blocks after $t$ tokens. A block
    the chunk fills is registered in the prefix cache. Returns the copy-on-write pairs, which
    a prompt's own blocks never need (it forks only once computed; the prefix cache shares
    full blocks only), so this is an empty list but for a manager that thinks otherwise."""
    copies = []
    for t in range(bm.table(seq.seq_id).num_tokens, end):
        fills = (t + 1) % bm.block_size == 0
        result = bm.append_slot(seq.seq_id, seq.token_ids[: t + 1] if fills else None)
        if result.cow is not None:
            copies.append(result.cow)
    return copies
