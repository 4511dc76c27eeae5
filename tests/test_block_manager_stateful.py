"""The block manager against a plain dict model, driven by hypothesis through random programs of
allocate / append / fork / free / swap-out / swap-in on small pools, without a prefix cache and
with each kind of prefix cache (prompts drawn from a tiny alphabet, so prefixes repeat).

Four oracles run after every step:

1. the shared invariants (:mod:`minipaged.invariants`);
2. a dict model of the protocol, with its own abstract block ids: the manager's free counts,
   table lengths and sharing pattern (which tables hold the same block) must match it;
3. simulated KV contents: every written token is a unique number stored at its slot; copy-on-write
   copies and swaps move those numbers; reading each sequence back through its block table must
   give exactly the tokens that sequence wrote. A missing copy-on-write, a stale table after a
   swap or a block handed out twice shows up here as a wrong token. A prefix hit must read
   back the very token ids it was matched on;
4. questions never change state: every ``can_*`` and every cache lookup leaves the snapshot and
   the cache's whole contents (the radix tree's shape included) exactly as they were.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from minipaged import invariants
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AllocStatus, BlockManager


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

    def allocate(self, seq: int, n: int, shared: list[int | None] = ()) -> None:
        """``shared[j]`` is the abstract block a prefix hit shares as block j (None: a cached
        block nobody held, taken afresh); the rest are new."""
        blocks = []
        for j in range(-(-n // self.block_size)):
            aid = shared[j] if j < len(shared) else None
            if aid is None:
                blocks.append(self._new("device"))
            else:
                self.refs["device"][aid] += 1
                blocks.append(aid)
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


PROMPTS = st.lists(st.integers(0, 2), min_size=1, max_size=40)  # few ids: prefixes repeat


class BlockManagerMachine(RuleBasedStateMachine):
    @initialize(
        block_size=st.sampled_from([1, 2, 4, 16]),
        num_device=st.integers(1, 24),
        num_host=st.integers(0, 16),
        watermark=st.sampled_from([0.0, 0.1]),
        prefix_caching=st.sampled_from([None, "hash", "radix"]),
    )
    def setup(self, block_size, num_device, num_host, watermark, prefix_caching):
        assume(watermark == 0 or int(watermark * num_device) > 0)  # else refused: keeps none
        self.manager = BlockManager(num_device, num_host, block_size, watermark, prefix_caching)
        self.caching = prefix_caching is not None
        self.ids: dict[int, list[int]] = {}  # each sequence's token ids
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

    def _write(self, seq, slot, token_id):
        # A unique serial catches a missing copy; the token id checks what a prefix hit reads.
        value = (token_id, next(self.tokens))
        self.data["device"][slot] = value
        self.history[seq].append(value)

    def _to_model(self) -> dict[int, int]:
        """Device block -> the dict model's abstract block, for every block a table holds."""
        return {
            block: aid
            for seq, table in self.manager.tables.items()
            if table.pool == "device"
            for block, aid in zip(table.blocks, self.model.tables[seq][1], strict=True)
        }

    def _cache_contents(self):
        cache = self.manager.prefix_cache
        return None if cache is None else cache.contents()

    def in_pool(self, pool):
        return sorted(s for s, t in self.manager.tables.items() if t.pool == pool)

    def _expect_refusal(self, action, error=OutOfBlocks):
        before = self.manager.snapshot()
        with pytest.raises(error):
            action()
        assert self.manager.snapshot() == before, "a refused action must leave the state unchanged"

    # -- rules ----------------------------------------------------------------------------

    @rule(prompt=PROMPTS)
    def allocate(self, prompt):
        seq = self.next_seq
        self.next_seq += 1
        num_tokens = len(prompt)
        token_ids = prompt if self.caching else None
        needed = self.manager.blocks_needed(num_tokens)
        status = self.manager.can_allocate(prompt if self.caching else num_tokens)
        m = self.manager
        never = needed > m.device.num_blocks - m.watermark_blocks
        assert (status is AllocStatus.NEVER) == never, f"{status} for {needed} blocks"
        if needed > self.manager.device.num_blocks:
            self._expect_refusal(lambda: m.allocate(seq, num_tokens, token_ids), ValueError)
            return
        if not status:
            if needed > self.manager.device.num_free and not self.caching:
                self._expect_refusal(lambda: self.manager.allocate(seq, num_tokens))
            return
        held = self._to_model()
        table = self.manager.allocate(seq, num_tokens, token_ids)
        hits = table.cached_tokens // self.block_size
        self.model.allocate(seq, num_tokens, [held.get(block) for block in table.blocks[:hits]])
        self.history[seq] = []
        self.ids[seq] = list(prompt)
        for t in range(num_tokens):
            if t < table.cached_tokens:  # a prefix hit: the cached block holds these tokens
                value = self.data["device"].get(table.slot(t))
                assert value is not None and value[0] == prompt[t], f"hit reads {value} at {t}"
                self.history[seq].append(value)
            else:  # the prefill writes every other prompt token
                self._write(seq, table.slot(t), prompt[t])

    @precondition(_in("device"))
    @rule(data=st.data())
    def append(self, data):
        seq = data.draw(st.sampled_from(self.in_pool("device")))
        token_id = data.draw(st.integers(0, 2))
        if not self.manager.can_append(seq):
            self._expect_refusal(lambda: self.manager.append_slot(seq))
            return
        others = self.manager.tables.items()
        holders = {s: list(t.blocks) for s, t in others if t.pool == "device" and s != seq}
        self.ids[seq].append(token_id)
        result = self.manager.append_slot(seq, self.ids[seq] if self.caching else None)
        self.model.append(seq)
        if result.cow is not None:
            src, dst = result.cow
            self._copy_block("device", src, "device", dst)
            (cow,) = [e for e in self.manager.pop_events() if e.kind == "cow-copy"]
            assert set(cow.shared_with) == {s for s, blocks in holders.items() if src in blocks}
        assert invariants.write_is_exclusive(self.manager.snapshot(), result.slot) == []
        self._write(seq, result.slot, token_id)

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
        self.ids[child] = list(self.ids[parent])
        assert self.manager.device.num_free == free_before, "fork must not allocate"

    @precondition(lambda machine: bool(machine.manager.tables))
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.manager.tables)))
        self.manager.free(seq)
        self.model.free(seq)
        del self.history[seq], self.ids[seq]

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

    @rule(prompt=PROMPTS, data=st.data())
    def ask_questions(self, prompt, data):
        """Every question, asked of the current state, must leave it exactly as it was."""
        m = self.manager
        before = (m.snapshot(), self._cache_contents())
        device, host = self.in_pool("device"), self.in_pool("host")
        m.can_allocate(len(prompt))
        m.can_allocate(prompt)
        m.can_allocate(prompt, len(prompt))
        if device:
            group = data.draw(st.lists(st.sampled_from(device), min_size=1, unique=True))
            m.can_append(*group)
            m.can_swap_out(group)
            m.next_token_blocks(*group)
        if host:
            group = data.draw(st.lists(st.sampled_from(host), min_size=1, unique=True))
            m.can_swap_in(group, extra_blocks=m.next_token_blocks(*group))
        if m.prefix_cache is not None:
            m.prefix_cache.match(prompt)
        assert (m.snapshot(), self._cache_contents()) == before, "a question changed the state"

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
