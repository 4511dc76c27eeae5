"""Every free block has R = 0, but not every block with R = 0 must be free.

Fails: rule_2_on_its_own
"""

from __future__ import annotations

from collections import Counter

from hypothesis.stateful import invariant

from minipaged.grader.properties import BlockManagerProgram


class BlockManagerMachine(BlockManagerProgram):
    @invariant()
    def refcounts_match_tables(self):
        state = self.manager.snapshot()
        holders = {"device": Counter(), "host": Counter()}
        for table in state.tables.values():
            for p in table.blocks:
                holders[table.pool][p] += 1
        for pool, counts in (("device", state.device_refcounts), ("host", state.host_refcounts)):
            for p, r in enumerate(counts):
                assert r == holders[pool][p], f"{pool} block {p}: R={r}, held by {holders[pool][p]}"

    @invariant()
    def free_list_holds_exactly_the_unreferenced_blocks(self):
        state = self.manager.snapshot()
        for counts, free in (
            (state.device_refcounts, state.device_free),
            (state.host_refcounts, state.host_free),
        ):
            assert len(free) == len(set(free)), f"duplicate on free list {free}"
            zero = {p for p, r in enumerate(counts) if r == 0}
            assert set(free) <= zero, f"free list {free} vs R=0 blocks {sorted(zero)}"

    @invariant()
    def writes_land_in_private_blocks(self):
        if self.last_write is None:
            return
        state = self.manager.snapshot()
        block = self.last_write // state.block_size
        assert state.device_refcounts[block] == 1, f"wrote into block {block} with R != 1"

    @invariant()
    def every_sequence_reads_back_its_own_tokens(self):
        for seq in self.manager.snapshot().tables:
            got = self.kv.read(self.manager.table(seq))
            assert list(got) == list(self.kv.written[seq]), (
                f"seq {seq}: {got} != {self.kv.written[seq]}"
            )

    def after_all_freed(self):
        state = self.manager.snapshot()
        assert all(r == 0 for r in state.device_refcounts), "device leak"
        assert all(r == 0 for r in state.host_refcounts), "host leak"
        assert len(state.device_free) == len(state.device_refcounts)
        assert len(state.host_free) == len(state.host_refcounts)
