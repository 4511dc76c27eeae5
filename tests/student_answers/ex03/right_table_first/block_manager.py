"""Right too: the child's table stored first, a slice for the copy, the refcounts raised last block first.

Fails: nothing
"""

from __future__ import annotations

from minipaged import block_manager
from minipaged.block_table import BlockTable
from minipaged.events import SeqId


class BlockManager(block_manager.BlockManager):
    def fork(self, parent: SeqId, child: SeqId) -> BlockTable:
        source = self.table(parent)
        if child in self.tables:
            raise ValueError(f"sequence {child} already has a block table")
        if source.pool == "host":
            raise ValueError(f"sequence {parent} is swapped out; swap it in before forking")
        self.tables[child] = BlockTable(source.block_size, source.blocks[:], source.num_tokens)
        for p in reversed(source.blocks):
            self.device.incref(p)
        return self.tables[child]

    def free(self, seq: SeqId) -> None:
        table = self.table(seq)
        pool = self.host if table.pool == "host" else self.device
        for p in reversed(table.blocks):
            pool.decref(p)
        del self.tables[seq]
