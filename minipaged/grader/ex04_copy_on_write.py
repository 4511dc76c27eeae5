"""Checks for exercise 04: append with copy-on-write (source text §5, "Write execution and block
splitting").

The student's ``block_manager.py`` defines ``BlockManager``, the library's class with
``append_slot`` written by the student. Forks here use the library's ``fork``.
"""

from __future__ import annotations

from functools import partial

from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AppendResult, BlockManager
from minipaged.grader.ex03_fork import check_random_programs_keep_every_invariant
from minipaged.grader.recorded_events import Checked
from minipaged.grader.report import (
    CheckFailed,
    Criterion,
    expect,
    expect_refused,
    expect_unchanged,
)


def block_manager_class(student) -> type[BlockManager]:
    return student.block_manager.BlockManager


def _manager(student, num_blocks: int = 8):
    return Checked(student.block_manager.BlockManager(num_blocks, block_size=4, watermark=0.0))


def _append(bm, seq: int) -> AppendResult:
    """``bm.append_slot(seq)``, failing with what it returned unless an ``AppendResult``."""
    result = bm.append_slot(seq)
    if not isinstance(result, AppendResult):
        raise CheckFailed(
            f"append_slot({seq}) returned {result!r} ({type(result).__name__}); return "
            "AppendResult(slot, cow), with cow=None or the (p, p_new) to copy"
        )
    return result


def check_append_writes_in_place_when_the_block_has_room(student):
    """R[p] = 1 and o > 0: the token is written in place, at slot T_r[j] * B + o, with no copy"""
    bm = _manager(student)
    bm.allocate(0, 5)  # T_0 = [0, 1]; t = 5 goes to j = 1, o = 1
    result = _append(bm, 0)
    expect(result.slot, 1 * 4 + 1, "append_slot(0) at t=5 with T_0=[0, 1], B=4: slot T_0[1]*B + o")
    expect(result.cow, None, "append_slot(0).cow into block 1, which only T_0 holds")
    expect(bm.table(0).blocks, [0, 1], "T_0 after append_slot(0) (no new block)")
    expect(bm.table(0).num_tokens, 6, "T_0.num_tokens after append_slot(0)")


def check_full_last_block_gets_a_fresh_block(student):
    """t mod B = 0: a fresh block with R[p] = 1 becomes logical block j, and o = 0"""
    bm = _manager(student)
    bm.allocate(0, 8)  # T_0 = [0, 1], both full
    result = _append(bm, 0)
    expect(bm.table(0).blocks, [0, 1, 2], "T_0 after appending t=8 to two full blocks of B=4")
    expect(result.slot, 2 * 4 + 0, "append_slot(0).slot of t=8: T_0[2]*B + 0")
    expect(bm.refcount(2), 1, "R[2], the fresh block, after append_slot(0)")
    expect(result.cow, None, "append_slot(0).cow when starting a fresh block")


def check_shared_partly_filled_block_is_copied(student):
    """R[p] > 1: allocate p_new, copy the o rows, R[p] -= 1, T_i[j] = p_new, write at o"""
    bm = _manager(student)
    bm.allocate(0, 6)  # T_0 = [0, 1]; block 1 holds 2 of 4 tokens
    bm.fork(0, 1)  # R[0] = R[1] = 2
    result = _append(bm, 1)  # seq 1 writes t = 6: j = 1, o = 2, p = 1 is shared
    if result.cow is None and result.slot // 4 == 1:
        raise CheckFailed(
            "append_slot(1): seq 1 wrote token t=6 (j=1, o=2) into block 1, shared with seq 0 "
            f"(R[1]=2), at slot {result.slot} with no copy-on-write: seq 0's next token would "
            "land on it. Expected cow=(1, p_new) and a slot in p_new"
        )
    if result.cow is None:
        raise CheckFailed(
            f"append_slot(1): seq 1 moved to block {result.slot // 4} for token t=6 but "
            "returned cow=None: the caller copies only the pairs it is given, so the o=2 tokens "
            f"already written in block 1 would be missing from block {result.slot // 4}. "
            "Return cow=(1, p_new)"
        )
    src, dst = result.cow
    expect(src, 1, "the p of append_slot(1).cow = (p, p_new): the shared T_1[1]")
    expect(bm.table(1).blocks, [0, dst], f"T_1 after append_slot(1) copied on write to p_new={dst}")
    expect(result.slot, dst * 4 + 2, f"append_slot(1).slot of t=6: p_new*B + o = {dst}*4 + 2")
    expect(
        (bm.refcount(1), bm.refcount(dst)),
        (1, 1),
        f"(R[1], R[{dst}]), (R[p], R[p_new]), after append_slot(1) copied block 1",
    )
    expect(bm.refcount(0), 2, "R[0] after append_slot(1): the full block 0 stays shared")
    expect(
        bm.table(0).blocks,
        [0, 1],
        "T_0 after append_slot(1): the other sequence's table does not change",
    )
    three = _manager(student)  # R[p] -= 1, not R[p] = 1: right for two sharers only
    three.allocate(0, 6)
    three.fork(0, 1)
    three.fork(0, 2)
    _append(three, 1)
    expect(
        three.refcount(1),
        2,
        "R[1] after append_slot(1) copied block 1 away from three sharers (seqs 0, 1 and 2; "
        "R[1] was 3): the writer lets go of its share alone, and seqs 0 and 2 still hold it",
    )


def check_last_sharer_writes_in_place(student):
    """after one sharer copied, the other holds the block alone (R[p] = 1) and writes in place"""
    bm = _manager(student)
    bm.allocate(0, 6)
    bm.fork(0, 1)
    _append(bm, 1)
    free_before = bm.device.num_free
    result = _append(bm, 0)
    expect(result.cow, None, "append_slot(0).cow into block 1 once seq 1 has its own copy (R[1]=1)")
    expect(result.slot, 1 * 4 + 2, "append_slot(0).slot for t=6")
    expect(
        bm.device.num_free,
        free_before,
        "device.num_free before and after append_slot(0), an in-place write",
    )


def check_full_shared_blocks_are_not_copied(student):
    """a fork at a block boundary copies nothing: the new token starts a fresh block"""
    bm = _manager(student)
    bm.allocate(0, 8)
    bm.fork(0, 1)
    result = _append(bm, 1)
    expect(result.cow, None, "append_slot(1).cow of t=8, after its two full shared blocks")
    expect(
        bm.table(1).blocks[:2], [0, 1], "T_1[:2] after append_slot(1): the full blocks stay shared"
    )
    expect((bm.refcount(0), bm.refcount(1)), (2, 2), "(R[0], R[1]) after append_slot(1)")


def check_out_of_blocks_changes_nothing(student):
    """with no free block, an append that needs one raises OutOfBlocks and changes nothing"""
    bm = Checked(student.block_manager.BlockManager(2, block_size=4, watermark=0.0))
    bm.allocate(0, 6)
    bm.fork(0, 1)  # the pool is full; block 1 is shared and partly filled
    _refused_append(
        bm,
        1,
        "append_slot(1) into shared block 1 with no free block for its copy",
        "append_slot(1) into shared block 1 with no free block returned instead of raising "
        "OutOfBlocks: copy-on-write needs a p_new, and the pool has none",
    )
    bm = Checked(student.block_manager.BlockManager(2, block_size=4, watermark=0.0))
    bm.allocate(0, 4)
    bm.allocate(1, 4)  # the pool is full; both last blocks are full
    _refused_append(
        bm,
        0,
        "append_slot(0) of t=4 after the full block 0, with no free block",
        "append_slot(0) of t=4 after the full block 0 returned instead of raising "
        "OutOfBlocks: t mod B = 0 needs a fresh block, and the pool has none",
    )


def check_append_refuses_a_sequence_on_the_host(student):
    """append_slot of a sequence swapped out to the host raises ValueError and changes nothing"""
    bm = Checked(student.block_manager.BlockManager(8, 4, block_size=4, watermark=0.0))
    bm.allocate(0, 6)
    bm.swap_out([0])
    expect_refused(
        partial(bm.append_slot, 0),
        ValueError,
        "append_slot(0) of seq 0, swapped out to the host (its table holds host block ids: "
        "no device slot to write)",
        bm.snapshot,
        where=student.where,
    )


def _refused_append(bm, seq: int, what: str, returned: str) -> None:
    before = bm.snapshot()
    try:
        bm.append_slot(seq)
    except OutOfBlocks:
        expect_unchanged(bm.snapshot(), before, what, "OutOfBlocks")
        return
    raise CheckFailed(returned)


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_append_writes_in_place_when_the_block_has_room,
        check_full_last_block_gets_a_fresh_block,
        check_shared_partly_filled_block_is_copied,
        check_last_sharer_writes_in_place,
        check_full_shared_blocks_are_not_copied,
        check_out_of_blocks_changes_nothing,
        check_append_refuses_a_sequence_on_the_host,
        check_random_programs_keep_every_invariant,
    )
)
