"""A right answer: one helper moves tables either way, a dict from old to new block.

Fails: nothing
"""

from __future__ import annotations

from collections.abc import Iterable

from minipaged import block_manager
from minipaged.allocator import OutOfBlocks
from minipaged.events import SeqId


class BlockManager(block_manager.BlockManager):
    def _move(self, seqs, source_name, target_name):
        seqs = list(seqs)
        target = self._pool(target_name)
        source = self._pool(source_name)
        tables = [self.table(s) for s in seqs]
        for s, table in zip(seqs, tables):
            if table.pool != source_name:
                raise ValueError(f"sequence {s} is in the {table.pool} pool, not {source_name}")
        distinct = {p for table in tables for p in table.blocks}
        if len(distinct) > target.num_free:
            raise OutOfBlocks(
                f"{target_name} pool has {target.num_free} free, needs {len(distinct)}"
            )
        mapping: dict[int, int] = {}
        for table in tables:
            new_blocks = []
            for p in table.blocks:
                if p in mapping:
                    target.incref(mapping[p])
                else:
                    mapping[p] = target.allocate()
                new_blocks.append(mapping[p])
            for p in reversed(table.blocks):
                source.decref(p)
            table.blocks = new_blocks
            table.pool = target_name
        return list(mapping.items())

    def swap_out(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        return self._move(seqs, "device", "host")

    def swap_in(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        return self._move(seqs, "host", "device")
