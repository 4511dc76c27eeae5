"""A peer's test of the paging notation and invariants DESIGN.md promises.

Written from DESIGN.md's "Names follow the seed's notation" and "Testing strategy" sections and
the docs' glossary: ``block_size`` is B, ``num_blocks`` is P_max, ``BlockTable`` is T_r,
``refcount(p)`` is R[p], j = floor(t/B), o = t mod B, slot = T_r[j]*B + o; and the four
invariants (refcount conservation, no block both free and used, no leak after all sequences
end, copy-on-write never writes a shared block), observed through the public snapshot.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from minipaged import memory
from minipaged.allocator import BlockAllocator
from minipaged.block_manager import BlockManager
from minipaged.block_table import BlockTable


def holders(state, pool="device"):
    """R[p] recomputed from the snapshot's tables: how many tables of ``pool`` hold p."""
    count = Counter()
    for table in state.tables.values():
        if table.pool == pool:
            count.update(set(table.blocks))
    return count


def assert_sound(state):
    """The invariants DESIGN.md lists, checked by hand on a ``BlockState``."""
    for pool, refcounts, free in (
        ("device", state.device_refcounts, state.device_free),
        ("host", state.host_refcounts, state.host_free),
    ):
        held = holders(state, pool)
        # refcount conservation
        assert all(refcounts[p] == held.get(p, 0) for p in range(len(refcounts))), pool
        # no block both free and used, each free block listed once
        assert len(set(free)) == len(free), pool
        assert set(free) == {p for p, r in enumerate(refcounts) if r == 0}, pool
    for table in state.tables.values():
        assert len(table.blocks) == -(-table.num_tokens // state.block_size)


def test_the_memory_math_names_the_notation():
    B = 4
    assert memory.logical_block(9, B) == 2  # j = floor(t / B)
    assert memory.block_offset(9, B) == 1  # o = t mod B
    assert memory.num_logical_blocks(9, B) == 3  # M = ceil(L / B)
    assert memory.slot([7, 3, 5], 9, B) == 5 * B + 1  # T_r[j] * B + o


def test_a_block_table_translates_a_token_to_its_slot():
    table = BlockTable(block_size=4, blocks=[7, 3, 5], num_tokens=10)
    assert table.logical_block(9) == 2
    assert table.offset(9) == 1
    assert table.slot(9) == 5 * 4 + 1
    assert table.slot(0) == 7 * 4
    assert table.num_blocks == 3


@given(
    blocks=st.lists(st.integers(0, 1000), min_size=1, max_size=8, unique=True),
    block_size=st.sampled_from([1, 2, 4, 8, 16, 32]),
    data=st.data(),
)
def test_slot_is_the_block_table_entry_times_b_plus_the_offset(blocks, block_size, data):
    t = data.draw(st.integers(0, len(blocks) * block_size - 1))
    table = BlockTable(block_size=block_size, blocks=blocks, num_tokens=t + 1)
    expected = blocks[t // block_size] * block_size + t % block_size
    assert table.slot(t) == expected == memory.slot(blocks, t, block_size)


def test_the_allocator_counts_refcounts_and_frees_at_zero():
    pool = BlockAllocator(num_blocks=4)
    assert pool.refcounts() == (0, 0, 0, 0)
    p = pool.allocate()
    assert pool.refcount(p) == 1
    assert pool.incref(p) == 2
    assert pool.decref(p) == 1
    assert p not in pool.free_blocks()
    assert pool.decref(p) == 0
    assert p in pool.free_blocks()
    assert pool.num_free == 4


def test_the_manager_gives_a_prompt_ceil_l_over_b_blocks():
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=4, block_size=4)
    table = manager.allocate(0, 10)
    assert len(table.blocks) == 3 == manager.blocks_needed(10)
    assert manager.table(0).blocks == table.blocks
    assert all(manager.refcount(p) == 1 for p in table.blocks)


def test_fork_shares_every_block_and_raises_its_refcount():
    manager = BlockManager(num_gpu_blocks=8, block_size=4)
    parent = manager.allocate(0, 6).blocks
    child = manager.fork(0, 1).blocks
    assert child == parent
    assert all(manager.refcount(p) == 2 for p in parent)


def test_copy_on_write_copies_only_the_partly_filled_shared_block():
    manager = BlockManager(num_gpu_blocks=8, block_size=4)
    manager.allocate(0, 6)  # blocks: one full, one half full
    manager.fork(0, 1)
    full, partial = manager.table(0).blocks
    result = manager.append_slot(1)
    assert result.cow is not None
    src, dst = result.cow
    assert src == partial and dst not in (full, partial)
    assert manager.table(1).blocks == [full, dst]
    assert result.slot == dst * 4 + 2  # t = 6: j = 1, o = 2
    assert manager.refcount(full) == 2
    assert manager.refcount(partial) == 1
    assert manager.refcount(dst) == 1


def test_appending_into_an_exclusive_block_copies_nothing():
    manager = BlockManager(num_gpu_blocks=8, block_size=4)
    manager.allocate(0, 6)
    result = manager.append_slot(0)
    assert result.cow is None
    assert result.slot == manager.table(0).slot(6)


def test_swap_out_and_in_keeps_the_table_length_and_sharing():
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=8, block_size=4)
    manager.allocate(0, 6)
    manager.fork(0, 1)
    copies = manager.swap_out([0, 1])
    assert len(copies) == 2  # each shared block moves once
    assert manager.table(0).pool == "host"
    assert all(r == 0 for r in manager.snapshot().device_refcounts)
    assert_sound(manager.snapshot())
    manager.swap_in([0, 1])
    assert manager.table(0).blocks == manager.table(1).blocks
    assert manager.table(0).num_tokens == 6
    assert_sound(manager.snapshot())


# A random program of manager operations, checked after every one against the invariants.
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["allocate", "fork", "append", "free", "swap"]), st.integers(0, 7)),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_invariants_hold_after_every_operation_and_nothing_leaks(program):
    manager = BlockManager(num_gpu_blocks=12, num_cpu_blocks=12, block_size=4)
    live: list[int] = []
    next_seq = 0
    for op, arg in program:
        state = manager.snapshot()
        if op == "allocate" and manager.blocks_needed(arg + 1) <= len(state.device_free):
            manager.allocate(next_seq, arg + 1)
            live.append(next_seq)
            next_seq += 1
        elif op == "fork" and live:
            parent = live[arg % len(live)]
            if manager.table(parent).pool == "device":
                manager.fork(parent, next_seq)
                live.append(next_seq)
                next_seq += 1
        elif op == "append" and live:
            seq = live[arg % len(live)]
            if manager.table(seq).pool == "device" and manager.can_append(seq):
                before = manager.snapshot()
                result = manager.append_slot(seq)
                block = result.slot // 4
                # CoW never writes a shared block: the slot's block is held by this table only
                assert manager.refcount(block) == 1
                if result.cow is None:
                    assert before.device_refcounts[block] in (0, 1)
        elif op == "free" and live:
            manager.free(live.pop(arg % len(live)))
        elif op == "swap" and live:
            seq = live[arg % len(live)]
            if manager.table(seq).pool == "device" and not any(
                set(manager.table(seq).blocks) & set(manager.table(other).blocks)
                for other in live
                if other != seq
            ):
                if manager.can_swap_out([seq]):
                    manager.swap_out([seq])
            elif manager.table(seq).pool == "host" and manager.can_swap_in([seq]).name == "OK":
                manager.swap_in([seq])
        assert_sound(manager.snapshot())
    for seq in live:
        manager.free(seq)
    final = manager.snapshot()
    assert not final.tables
    assert all(r == 0 for r in final.device_refcounts + final.host_refcounts)
    assert len(final.device_free) == 12 and len(final.host_free) == 12


def test_the_shared_invariant_module_agrees_on_a_sound_state():
    from minipaged import invariants

    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=4, block_size=4)
    manager.allocate(0, 6)
    manager.fork(0, 1)
    manager.append_slot(1)
    assert all(not v for v in invariants.check(manager.snapshot()).values())
    invariants.assert_holds(manager)


def refcount_changes(before, after) -> set[tuple[str, int]]:
    """(pool, p) for every block whose R[p] differs between two snapshots."""
    return {
        (pool, p)
        for pool, old, new in (
            ("device", before.device_refcounts, after.device_refcounts),
            ("host", before.host_refcounts, after.host_refcounts),
        )
        for p, (r, s) in enumerate(zip(old, new, strict=True))
        if r != s
    }


def test_the_manager_records_an_event_for_every_change():
    """Each call's events, kind by kind, and between them they name every block whose
    refcount the call changed, and no other."""
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=8, block_size=4)
    calls = [
        (lambda: manager.allocate(0, 6), ["alloc", "alloc"]),
        (lambda: manager.fork(0, 1), ["fork", "incref", "incref"]),
        (lambda: manager.append_slot(1), ["cow-copy", "decref"]),  # token 6 of 8: o = 2
        (lambda: manager.swap_out([0]), ["swap-out"]),
        (lambda: manager.free(1), ["free", "free"]),  # seq 0 is on the host: R drops to 0
    ]
    for call, kinds in calls:
        before = manager.snapshot()
        call()
        events = manager.pop_events()
        assert [e.kind for e in events] == kinds
        named = {
            (pool, p) for e in events for pool in ("device", "host") for p in e.blocks_in(pool)
        }
        assert named == refcount_changes(before, manager.snapshot()), kinds
    assert manager.pop_events() == []


@settings(max_examples=30, deadline=None)
@given(OPERATIONS)
def test_questions_never_change_state(program):
    """DESIGN.md: "Questions (``can_*``, cache lookups) never change state"."""
    manager = BlockManager(num_gpu_blocks=8, num_cpu_blocks=8, block_size=4, prefix_caching="hash")
    tokens = list(range(40))
    for seq, (op, arg) in enumerate(program[:6]):
        if op in ("allocate", "fork") and manager.can_allocate(tokens[: arg + 1]).name == "OK":
            manager.allocate(seq, arg + 1, tokens[: arg + 1])
    manager.pop_events()
    before = manager.snapshot()
    live = list(before.tables)
    manager.can_allocate(5, tokens[:9])
    manager.can_append(*live)
    manager.can_swap_out(live)
    manager.can_swap_in([])
    manager.next_token_blocks(*live)
    manager.prefix_hits(tokens[:12])
    manager.blocks_needed(17)
    for seq in live:
        manager.table(seq)
    assert manager.snapshot() == before
    assert manager.pop_events() == []
