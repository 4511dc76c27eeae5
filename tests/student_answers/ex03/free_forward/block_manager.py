"""free releases the first block first.

Fails: free_releases_the_last_block_first
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
        copy = BlockTable(source.block_size, list(source.blocks), source.num_tokens)
        for p in copy.blocks:
            self.device.incref(p)
        self.tables[child] = copy
        return copy

    def free(self, seq: SeqId) -> None:
        table = self.table(seq)
        pool = self.host if table.pool == "host" else self.device
        for p in table.blocks:
            pool.decref(p)
        del self.tables[seq]
