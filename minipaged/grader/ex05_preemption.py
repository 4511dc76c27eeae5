"""Checks for exercise 05: preemption by swapping and by recomputation (source text §6).

The student writes ``BlockManager.swap_out`` / ``swap_in`` in ``block_manager.py`` and
``Scheduler._preempt`` in ``scheduler.py``, each a subclass of the library's class. The
scheduler checks (``ex05_scheduler``) run on the library's block manager, so the two parts are
graded apart.
"""

from __future__ import annotations

from functools import partial

from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import BlockManager
from minipaged.grader import ex05_scheduler as scheduler
from minipaged.grader.ex03_fork import check_random_programs_keep_every_invariant
from minipaged.grader.properties import SimulatedKV
from minipaged.grader.recorded_events import Checked
from minipaged.grader.report import CheckFailed, Criterion, expect, expect_refused


def block_manager_class(student) -> type[BlockManager]:
    return student.block_manager.BlockManager


def _manager(student, device: int = 8, host: int = 8):
    return Checked(student.block_manager.BlockManager(device, host, block_size=4, watermark=0.0))


def _expect_moves(pairs, before: list[int], after: list[int], call: str, pools: str) -> None:
    """Fail unless ``pairs`` copy each distinct block of T_r (``before``) once, onto the block
    that replaces it at the same place of T_r (``after``). Which free blocks of the other pool
    they are, and the pairs' order, are the student's choice: a table moved last block first
    is as right as one moved first block first. ``pools`` names the pair's order."""
    if len(after) != len(before):
        raise CheckFailed(
            f"{call} left T_r={after}, from T_r={before}: every block moves, the partly filled "
            "last one too, so T_r keeps its length"
        )
    expected = sorted(set(zip(before, after, strict=True)))
    got = sorted(tuple(pair) for pair in pairs) if isinstance(pairs, list | tuple) else pairs
    one_each = len({old for old, _ in expected}) == len({new for _, new in expected})
    if got != expected or not one_each:
        raise CheckFailed(
            f"{call} returned the copies {pairs}, with T_r={before} before and {after} after: "
            f"expected one {pools} pair per distinct block, each copying a block onto the "
            f"block that replaces it in T_r, in any order: {expected}"
        )


def check_swap_out_moves_the_table_to_host(student):
    """swap_out gives each block a host block, frees the device blocks and returns the pairs"""
    bm = _manager(student)
    bm.allocate(0, 6)  # T_0 = [0, 1]
    bm.allocate(1, 5)  # T_1 = [2, 3]
    pairs = bm.swap_out([1])
    table = bm.table(1)
    expect(table.pool, "host", "T_1.pool after swap_out([1])")
    _expect_moves(pairs, [2, 3], table.blocks, "swap_out([1])", "(device, host)")
    expect(bm.device.num_free, 6, "device.num_free after swap_out([1])")
    expect(
        [bm.host.refcount(p) for p in table.blocks],
        [1, 1],
        f"host R of T_1={table.blocks}, the two copies, after swap_out([1])",
    )


def check_a_block_shared_inside_the_group_is_copied_once(student):
    """a block two swapped sequences share gets one host block, with R = 2, and stays shared"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.fork(0, 1)  # T_0 = T_1 = [0, 1], R = 2
    pairs = bm.swap_out([0, 1])
    t0, t1 = bm.table(0), bm.table(1)
    expect(t1.blocks, t0.blocks, "T_1 against T_0 after swap_out([0, 1]): still shared")
    _expect_moves(pairs, [0, 1], t0.blocks, "swap_out([0, 1]) of both sharers", "(device, host)")
    expect(
        [bm.host.refcount(p) for p in t0.blocks],
        [2, 2],
        f"host R of T_0={t0.blocks} after swap_out([0, 1]) of both sharers",
    )
    pairs = bm.swap_in([0, 1])
    expect(len(pairs), 2, "the number of copies swap_in([0, 1]) returns")
    t0, t1 = bm.table(0), bm.table(1)
    expect(t0.blocks, t1.blocks, "T_0 against T_1 after swap_in([0, 1]): still shared")
    expect(
        [bm.refcount(p) for p in t0.blocks],
        [2, 2],
        "device R of T_0's blocks after swap_in([0, 1])",
    )
    expect(bm.host.num_free, 8, "host.num_free after swap_in([0, 1])")
    mixed = _manager(student)  # a group that shares one block but not the other
    mixed.allocate(0, 6)
    mixed.fork(0, 1)
    mixed.append_slot(1)  # copy-on-write: T_1 = [0, p_new]; block 1 is seq 0's alone
    mixed.swap_out([0, 1])
    tables = (mixed.table(0).blocks, mixed.table(1).blocks)
    expect(
        {p: mixed.host.refcount(p) for p in sorted({*tables[0], *tables[1]})},
        {p: sum(p in t for t in tables) for p in sorted({*tables[0], *tables[1]})},
        f"host R of each block of T_0={tables[0]} and T_1={tables[1]} after fork(0, 1), "
        "append_slot(1) (a copy-on-write: only the first block is still shared), "
        "swap_out([0, 1]): R[p] counts the tables that hold p, not the sequences swapped",
    )


def check_swapping_one_sharer_out_frees_nothing(student):
    """swapping out one of two sharers frees no device block: R[p] drops from 2 to 1"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.fork(0, 1)
    bm.swap_out([1])
    expect(
        bm.device.num_free,
        6,
        "device.num_free after fork(0, 1), swap_out([1]): seq 0 still holds both",
    )
    expect([bm.refcount(p) for p in (0, 1)], [1, 1], "device [R[0], R[1]] after swap_out([1])")
    host = bm.table(1).blocks
    expect(
        [bm.host.refcount(p) for p in host],
        [1] * len(host),
        f"host R of T_1={host}, the copies, after fork(0, 1), swap_out([1]): R[p] counts the "
        "tables that hold p, and only T_1 holds the copies (T_0 keeps the device blocks, so "
        "their device R of 2 is not the copies')",
    )
    bm.swap_in([1])
    if set(bm.table(1).blocks) & set(bm.table(0).blocks):
        raise CheckFailed(
            f"after swap_in([1]), T_1={bm.table(1).blocks} shares blocks with "
            f"T_0={bm.table(0).blocks}. Seq 1's blocks were copied to the host alone, so they "
            "must come back into fresh device blocks of its own, each with R = 1"
        )


def check_swap_out_releases_the_last_block_first(student):
    """swap_out releases each device block last block first, as free does"""
    bm = _manager(student)
    bm.allocate(0, 10)  # T_0 = [0, 1, 2]
    bm.swap_out([0])
    tail = list(bm.device.free_blocks()[-3:])
    if tail != [2, 1, 0]:
        raise CheckFailed(
            f"swap_out([0]) with T_0=[0, 1, 2] left the device free list ending {tail}, "
            "expected [2, 1, 0]: release the last block first, as free does (the allocator "
            "reuses the front of the free list, and with prefix caching it must evict a "
            "cached prefix's tail before its root)"
        )


def check_swap_in_restores_the_contents(student):
    """after swap-out, reuse of its device blocks and swap-in, a sequence reads back its tokens

    Rule: the pairs swap_out returns copy each device block of T_r to the host block that
    replaces it in T_r, and swap_in's pairs copy them back the same way, so T_r always
    points at blocks holding the sequence's own tokens."""
    bm = _manager(student, device=6)
    kv = SimulatedKV(4)
    for seq, length in ((0, 6), (1, 5)):
        table = bm.allocate(seq, length)
        for t in range(length):
            kv.write(seq, table.slot(t))
    for device_block, host_block in bm.swap_out([1]):
        kv.copy("device", device_block, "host", host_block)
    expect(bm.table(1).pool, "host", "T_1.pool after swap_out([1])")  # else nothing is checked
    table = bm.allocate(2, 8)  # reuses seq 1's old device blocks and overwrites them
    for t in range(8):
        kv.write(2, table.slot(t))
    bm.free(0)
    for host_block, device_block in bm.swap_in([1]):
        kv.copy("host", host_block, "device", device_block)
    table = bm.table(1)
    expect(table.pool, "device", "T_1.pool after swap_in([1])")
    expect(
        kv.read(table),
        kv.written[1],
        f"seq 1's tokens read through T_1={table.blocks} after swap_out([1]), allocate(2, 8), "
        "free(0), swap_in([1])",
    )


def check_swaps_that_do_not_fit_are_refused(student):
    """a swap the other pool cannot hold raises OutOfBlocks and changes nothing"""
    for host, lengths, what in [
        (1, [6], "swap_out([0]) of 2 blocks to 1 host block"),
        (
            3,
            [6, 6],
            "swap_out([0, 1]) of 4 distinct blocks to 3 host blocks (count the whole group's "
            "blocks before moving any table)",
        ),
    ]:
        bm = _manager(student, device=8, host=host)
        for seq, length in enumerate(lengths):
            bm.allocate(seq, length)
        swap = partial(bm.swap_out, list(range(len(lengths))))
        expect_refused(swap, OutOfBlocks, what, bm.snapshot, where=student.where)
    bm = _manager(student, device=8, host=4)
    bm.allocate(0, 6)
    bm.allocate(1, 10)
    bm.swap_out([0])  # 2 of the 4 host blocks are taken
    what = (
        "swap_out([1]) of 3 blocks when 2 of the host's 4 blocks are free (count the free "
        "blocks, not the pool's size)"
    )
    expect_refused(partial(bm.swap_out, [1]), OutOfBlocks, what, bm.snapshot, where=student.where)


def check_swap_in_refuses_a_sequence_on_the_device(student):
    """swap_in of a sequence that is not in host memory raises ValueError and changes nothing"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.allocate(1, 5)
    bm.swap_out([1])
    for seqs, what in [
        ([0], "swap_in([0]) of seq 0, on the device"),
        (
            [1, 0],
            "swap_in([1, 0]) of seq 1, on the host, and seq 0, on the device (check every "
            "sequence before moving any)",
        ),
    ]:
        swap = partial(bm.swap_in, seqs)
        expect_refused(swap, ValueError, what, bm.snapshot, where=student.where)


def check_swap_out_without_a_host_pool_is_refused(student):
    """swap_out in a manager without a host pool raises ValueError and changes nothing"""
    bm = _manager(student, host=0)
    bm.allocate(0, 6)
    swap = partial(bm.swap_out, [0])
    what = "swap_out([0]) in a manager built with num_cpu_blocks=0 (no host pool at all)"
    expect_refused(swap, ValueError, what, bm.snapshot, where=student.where)


CRITERIA = tuple(
    Criterion(check, on_the_library=check.__module__ == scheduler.__name__)  # their scheduler
    for check in (
        check_swap_out_moves_the_table_to_host,
        check_a_block_shared_inside_the_group_is_copied_once,
        check_swapping_one_sharer_out_frees_nothing,
        check_swap_out_releases_the_last_block_first,
        check_swap_in_restores_the_contents,
        check_swaps_that_do_not_fit_are_refused,
        check_swap_out_without_a_host_pool_is_refused,
        check_swap_in_refuses_a_sequence_on_the_device,
        scheduler.check_recompute_frees_the_blocks_and_requeues,
        scheduler.check_recomputed_request_prefills_prompt_and_generated,
        scheduler.check_swap_preemption_moves_the_blocks_to_host,
        scheduler.check_swap_falls_back_to_recompute_without_host_room,
        scheduler.check_a_request_with_several_sequences_is_swapped,
        scheduler.check_a_request_of_several_sequences_without_host_room_is_recomputed,
        scheduler.check_a_victim_keeps_its_arrival_order,
        scheduler.check_the_preempt_event_comes_first,
        check_random_programs_keep_every_invariant,  # last: the slowest, and the least specific
    )
)
