"""The block manager against a plain dict model, driven by hypothesis through random programs of
allocate / append / fork / free / swap-out / swap-in on small pools.

Three oracles run after every step:

1. the shared invariants (:mod:`minipaged.invariants`);
2. a dict model of the protocol, with its own abstract block ids: the manager's free counts,
   table lengths and sharing pattern (which tables hold the same block) must match it;
3. simulated KV contents: every written token is a unique number stored at its slot; copy-on-write
   copies and swaps move those numbers; reading each sequence back through its block table must
   give exactly the tokens that sequence wrote. A missing copy-on-write, a stale table after a
   swap or a block handed out twice shows up here as a wrong token.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from minipaged import invariants
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import BlockManager


class DictModel:
    """The protocol of the source text's §3, §5 and §6 over abstract block ids."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.refs: dict[str, dict[int, int]] = {"device": {}, "host": {}}
        self.tables: dict[int, tuple[str, list[int], int]] = {}
        self._ids = itertools.count()

    def _new(self, pool: str) -> int:
        aid = next(self._ids)
        self.refs[pool][aid] = 1
        return aid

    def _decref(self, pool: str, aid: int) -> None:
        self.refs[pool][aid] -= 1
        if self.refs[pool][aid] == 0:
            del self.refs[pool][aid]

    def allocate(self, seq: int, n: int) -> None:
        blocks = [self._new("device") for _ in range(-(-n // self.block_size))]
        self.tables[seq] = ("device", blocks, n)

    def append(self, seq: int) -> None:
        pool, blocks, n = self.tables[seq]
        if n % self.block_size == 0:
            blocks.append(self._new("device"))
        elif self.refs["device"][blocks[-1]] > 1:
            self._decref("device", blocks[-1])
            blocks[-1] = self._new("device")
        self.tables[seq] = (pool, blocks, n + 1)

    def fork(self, parent: int, child: int) -> None:
        pool, blocks, n = self.tables[parent]
        for aid in blocks:
            self.refs[pool][aid] += 1
        self.tables[child] = (pool, list(blocks), n)

    def free(self, seq: int) -> None:
        pool, blocks, _ = self.tables.pop(seq)
        for aid in blocks:
            self._decref(pool, aid)

    def move(self, seqs: list[int], dst: str) -> None:
        moved: dict[int, int] = {}
        for seq in seqs:
            src, blocks, n = self.tables[seq]
            new_blocks = []
            for aid in blocks:
                if aid in moved:
                    self.refs[dst][moved[aid]] += 1
                else:
                    moved[aid] = self._new(dst)
                new_blocks.append(moved[aid])
                self._decref(src, aid)
            self.tables[seq] = (dst, new_blocks, n)


def _in(pool):
    """Precondition: some sequence lives in ``pool``."""
    return lambda machine: bool(machine.in_pool(pool))


class BlockManagerMachine(RuleBasedStateMachine):
    @initialize(
        block_size=st.sampled_from([1, 2, 4, 16]),
        num_device=st.integers(1, 24),
        num_host=st.integers(0, 16),
        watermark=st.sampled_from([0.0, 0.1]),
    )
    def setup(self, block_size, num_device, num_host, watermark):
        self.manager = BlockManager(num_device, num_host, block_size, watermark)
        self.model = DictModel(block_size)
        self.block_size = block_size
        self.next_seq = 0
        self.tokens = itertools.count(1)
        self.history: dict[int, list[int]] = {}
        # Simulated KV contents: pool -> {slot: token}.
        self.data: dict[str, dict[int, int]] = {"device": {}, "host": {}}

    # -- helpers --------------------------------------------------------------------------

    def _copy_block(self, src_pool, src, dst_pool, dst):
        b = self.block_size
        for o in range(b):
            value = self.data[src_pool].get(src * b + o)
            if value is None:
                self.data[dst_pool].pop(dst * b + o, None)
            else:
                self.data[dst_pool][dst * b + o] = value

    def _write(self, seq, slot):
        token = next(self.tokens)
        self.data["device"][slot] = token
        self.history[seq].append(token)

    def in_pool(self, pool):
        return sorted(s for s, t in self.manager.tables.items() if t.pool == pool)

    def _expect_refusal(self, action, error=OutOfBlocks):
        before = self.manager.snapshot()
        with pytest.raises(error):
            action()
        assert self.manager.snapshot() == before, "a refused action must leave the state unchanged"

    # -- rules ----------------------------------------------------------------------------

    @rule(num_tokens=st.integers(1, 40))
    def allocate(self, num_tokens):
        seq = self.next_seq
        self.next_seq += 1
        needed = self.manager.blocks_needed(num_tokens)
        if needed > self.manager.device.num_blocks:
            self._expect_refusal(lambda: self.manager.allocate(seq, num_tokens), ValueError)
            return
        if not self.manager.can_allocate(num_tokens):
            if needed > self.manager.device.num_free:
                self._expect_refusal(lambda: self.manager.allocate(seq, num_tokens))
            return
        table = self.manager.allocate(seq, num_tokens)
        self.model.allocate(seq, num_tokens)
        self.history[seq] = []
        for t in range(num_tokens):  # the prefill writes every prompt token
            self._write(seq, table.slot(t))

    @precondition(_in("device"))
    @rule(data=st.data())
    def append(self, data):
        seq = data.draw(st.sampled_from(self.in_pool("device")))
        if not self.manager.can_append(seq):
            self._expect_refusal(lambda: self.manager.append_slot(seq))
            return
        others = self.manager.tables.items()
        holders = {s: list(t.blocks) for s, t in others if t.pool == "device" and s != seq}
        result = self.manager.append_slot(seq)
        self.model.append(seq)
        if result.cow is not None:
            src, dst = result.cow
            self._copy_block("device", src, "device", dst)
            (cow,) = [e for e in self.manager.pop_events() if e.kind == "cow-copy"]
            assert set(cow.shared_with) == {s for s, blocks in holders.items() if src in blocks}
        assert invariants.write_is_exclusive(self.manager.snapshot(), result.slot) == []
        self._write(seq, result.slot)

    @precondition(_in("device"))
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(self.in_pool("device")))
        child = self.next_seq
        self.next_seq += 1
        free_before = self.manager.device.num_free
        self.manager.fork(parent, child)
        self.model.fork(parent, child)
        self.history[child] = list(self.history[parent])
        assert self.manager.device.num_free == free_before, "fork must not allocate"

    @precondition(lambda machine: bool(machine.manager.tables))
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.manager.tables)))
        self.manager.free(seq)
        self.model.free(seq)
        del self.history[seq]

    @precondition(_in("device"))
    @rule(data=st.data())
    def swap_out(self, data):
        group = data.draw(
            st.lists(st.sampled_from(self.in_pool("device")), min_size=1, max_size=3, unique=True)
        )
        if not self.manager.can_swap_out(group):
            if self.manager.host is None:
                self._expect_refusal(lambda: self.manager.swap_out(group), ValueError)
            else:
                self._expect_refusal(lambda: self.manager.swap_out(group))
            return
        mapping = self.manager.swap_out(group)
        self.model.move(group, "host")
        assert len(mapping) == len({b for s in group for b in self.model.tables[s][1]})
        for device_block, host_block in mapping:
            self._copy_block("device", device_block, "host", host_block)

    @precondition(_in("host"))
    @rule(data=st.data())
    def swap_in(self, data):
        group = data.draw(
            st.lists(st.sampled_from(self.in_pool("host")), min_size=1, max_size=3, unique=True)
        )
        needed = len({b for s in group for b in self.manager.table(s).blocks})
        if needed > self.manager.device.num_free:
            assert not self.manager.can_swap_in(group)
            self._expect_refusal(lambda: self.manager.swap_in(group))
            return
        for host_block, device_block in self.manager.swap_in(group):
            self._copy_block("host", host_block, "device", device_block)
        self.model.move(group, "device")

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def shared_invariants_hold(self):
        invariants.assert_holds(self.manager)

    @invariant()
    def manager_agrees_with_dict_model(self):
        m = self.manager
        assert m.device.num_used == len(self.model.refs["device"])
        assert (m.host.num_used if m.host else 0) == len(self.model.refs["host"])
        assert set(m.tables) == set(self.model.tables)
        to_model: dict[tuple[str, int], int] = {}
        to_manager: dict[int, tuple[str, int]] = {}
        for seq, table in m.tables.items():
            pool, model_blocks, n = self.model.tables[seq]
            assert (table.pool, table.num_tokens) == (pool, n)
            assert len(table.blocks) == len(model_blocks)
            for block, aid in zip(table.blocks, model_blocks, strict=True):
                # The same sharing pattern: a bijection between real and abstract blocks.
                assert to_model.setdefault((pool, block), aid) == aid
                assert to_manager.setdefault(aid, (pool, block)) == (pool, block)
                assert m.refcount(block, pool) == self.model.refs[pool][aid]

    @invariant()
    def every_sequence_reads_back_its_own_tokens(self):
        for seq, table in self.manager.tables.items():
            read = [self.data[table.pool].get(table.slot(t)) for t in range(table.num_tokens)]
            assert read == self.history[seq], f"seq {seq} reads back other tokens"

    def teardown(self):
        # No leak: once every sequence is freed, every block is free again.
        if hasattr(self, "manager"):
            for seq in list(self.manager.tables):
                self.manager.free(seq)
            assert self.manager.device.num_free == self.manager.device.num_blocks
            if self.manager.host:
                assert self.manager.host.num_free == self.manager.host.num_blocks
            invariants.assert_holds(self.manager)


BlockManagerMachine.TestCase.settings = settings(
    max_examples=max(200, settings().max_examples), stateful_step_count=40
)
TestBlockManagerMachine = BlockManagerMachine.TestCase
