"""The shared block copied, but its old R[p] left as it was.

Fails: shared_partly_filled_block_is_copied
"""

from __future__ import annotations

from collections.abc import Sequence

from minipaged import block_manager
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AppendResult
from minipaged.events import SeqId


class BlockManager(block_manager.BlockManager):
    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        table = self.table(seq)
        if table.pool != "device":
            raise ValueError(f"sequence {seq} is swapped out; swap it in before appending")
        t = table.num_tokens
        j, o = table.logical_block(t), table.offset(t)
        copied = None
        if o == 0:
            fresh = self.device.allocate()
            table.blocks.append(fresh)
        else:
            p = table.blocks[j]
            if self.device.refcount(p) > 1:
                if self.device.num_free == 0:
                    raise OutOfBlocks(f"no free block to copy shared block {p}")
                new = self.device.allocate()
                table.blocks[j] = new
                copied = (p, new)
        table.num_tokens = t + 1
        return AppendResult(table.blocks[j] * table.block_size + o, copied)
