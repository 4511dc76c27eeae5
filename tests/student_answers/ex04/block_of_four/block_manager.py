"""Blocks of four tokens, as in every example of the README: position t sits in block t // 4
at offset t % 4, whatever block_size the manager was made with.

Fails: append_writes_in_place_when_the_block_has_room
"""

from __future__ import annotations

from collections.abc import Sequence

from minipaged import block_manager
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AppendResult
from minipaged.events import SeqId

TOKENS_PER_BLOCK = 4


class BlockManager(block_manager.BlockManager):
    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        table = self.table(seq)
        if table.pool == "host":
            raise ValueError(f"sequence {seq} lives on the host now: swap it in first")
        position = table.num_tokens
        index, within = divmod(position, TOKENS_PER_BLOCK)
        if within == 0:  # every block so far is full: start a new one
            if not self.device.num_free:
                raise OutOfBlocks(f"sequence {seq} needs a new block and none is free")
            table.blocks.append(self.device.allocate())
            table.num_tokens += 1
            return AppendResult(table.blocks[index] * TOKENS_PER_BLOCK, None)
        shared = table.blocks[index]
        copy = None
        if self.device.refcount(shared) > 1:  # another table reads this block: copy it first
            if not self.device.num_free:
                raise OutOfBlocks(f"no free block to copy shared block {shared} into")
            mine = self.device.allocate()
            self.device.decref(shared)
            table.blocks[index] = mine
            copy = (shared, mine)
        table.num_tokens += 1
        return AppendResult(table.blocks[index] * TOKENS_PER_BLOCK + within, copy)
