"""Broken block managers for exercise 06: each has one bug a real allocator could have, and none
raises an error. Only properties catch them; that is the exercise.

Every member takes the library ``BlockManager``'s arguments and changes one method, so a
program that drives the library can drive each of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from minipaged.allocator import BlockAllocator
from minipaged.block_manager import AppendResult, BlockManager
from minipaged.block_table import BlockTable
from minipaged.events import SeqId


class LeakOnFree(BlockManager):
    """Leak: free lets go of every block but the last one, whose R[p] stays at least 1 with
    no table holding it, so it is never free again."""

    def free(self, seq: SeqId) -> None:
        self.table(seq).blocks.pop()
        super().free(seq)


class TrustingAllocator(BlockAllocator):
    """An allocator that believes its callers: decref of a free block does not complain, it
    drives R[p] below zero."""

    def decref(self, block: int) -> int:
        self._refcounts[block] -= 1
        if self._refcounts[block] <= 0:
            self._free[block] = None
        return self._refcounts[block]


class DoubleFree(BlockManager):
    """Double free: fork copies the parent's table but forgets to raise R[p] (§5, step 2).
    When parent and child are both freed, each shared block is freed twice; after the first,
    a new sequence can be handed a block the child still reads."""

    def __init__(self, num_gpu_blocks: int, *args, **kwargs) -> None:
        super().__init__(num_gpu_blocks, *args, **kwargs)
        self.device = TrustingAllocator(num_gpu_blocks, pool="device")

    def fork(self, parent: SeqId, child: SeqId) -> BlockTable:
        source = self.table(parent)
        table = BlockTable(self.block_size, list(source.blocks), source.num_tokens)
        self.tables[child] = table
        return table


class MissingCow(BlockManager):
    """Missing copy-on-write: append_slot writes into the last block even when another table
    shares it (R[p] > 1), overwriting that sequence's token (§5, case 2)."""

    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        table = self.table(seq)
        if not table.is_last_block_full and self.device.refcount(table.blocks[-1]) > 1:
            t = table.num_tokens
            table.num_tokens += 1
            return AppendResult(table.slot(t))
        return super().append_slot(seq, token_ids)


class LostCowCopy(BlockManager):
    """Copy-on-write without the copy: append_slot moves the writer to a fresh block and
    fixes every refcount, but never asks for the o rows already written to be copied (cow is
    None), so the new block starts with garbage where the shared tokens were."""

    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        result = super().append_slot(seq, token_ids)
        return AppendResult(result.slot)


class StaleTableAfterSwap(BlockManager):
    """Stale table after swap: swap_in copies the blocks back to the device and frees the
    host blocks, but leaves T_r holding the host block ids (§6)."""

    def swap_in(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        seqs = list(seqs)
        host_ids = {seq: list(self.table(seq).blocks) for seq in seqs}
        mapping = super().swap_in(seqs)
        for seq in seqs:
            self.tables[seq].blocks = host_ids[seq]
        return mapping


BUG_ZOO: tuple[type[BlockManager], ...] = (
    LeakOnFree,
    DoubleFree,
    MissingCow,
    LostCowCopy,
    StaleTableAfterSwap,
)
