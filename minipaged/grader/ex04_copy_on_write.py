"""Checks for exercise 04: append with copy-on-write (source text §5, "Write execution and block
splitting").

The student's ``block_manager.py`` defines ``BlockManager``, the library's class with
``append_slot`` written by the student. Forks here use the library's ``fork``. Each case that
depends on $B$ runs at the fixed $B = 4$, then again at a $B$ drawn for the grading
(``minipaged.grader.drawn_sizes``).
"""

from __future__ import annotations

from functools import partial

from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AppendResult, BlockManager
from minipaged.grader.drawn_sizes import at_fixed_then_drawn
from minipaged.grader.ex03_fork import check_random_programs_keep_every_invariant
from minipaged.grader.recorded_events import Checked
from minipaged.grader.report import (
    CheckFailed,
    Criterion,
    expect,
    expect_refused,
    expect_unchanged,
)

BLOCK_SIZE = 4
"""The $B$ of the fixed cases, the same at every grading: the one their messages were written
for."""

DRAWN_BLOCK_SIZES = (3, 5, 6, 7, 8)
"""The $B$ each grading draws for the same cases run again: never the fixed 4 (an append that
computed with 4 for $B$ passed every case while all were at $B = 4$), and at least 3, so that a
token at $o = 2$ leaves its block partly filled."""

AHEAD = 99
"""The sequence that takes block 0 before a case at the drawn $B$ (``_manager``)."""


def block_manager_class(student) -> type[BlockManager]:
    return student.block_manager.BlockManager


def _manager(student, num_blocks: int = 8, block_size: int = BLOCK_SIZE):
    """A manager with ``num_blocks`` free blocks of ``block_size`` tokens. At any $B$ but the
    fixed one, sequence ``AHEAD`` first takes block 0 (one token) of a pool one block larger,
    so that the tables start at block 1: with $\\mathcal{T}_r = [0, 1, ...]$ the slot
    $\\mathcal{T}_r[j] \\cdot B + o$ is $t$ whatever $B$ is, and a wrong $B$ would go unseen."""
    ahead = block_size != BLOCK_SIZE
    manager = student.block_manager.BlockManager
    bm = Checked(manager(num_blocks + ahead, block_size=block_size, watermark=0.0))
    if ahead:
        bm.allocate(AHEAD, 1)
    return bm


def _at_each_block_size(case, student) -> None:
    """``case(student, B)`` at the fixed $B$, then at a $B$ drawn for this grading."""
    at_fixed_then_drawn(partial(case, student), "B", BLOCK_SIZE, DRAWN_BLOCK_SIZES)


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
    _at_each_block_size(_in_place, student)


def _in_place(student, b: int) -> None:
    bm = _manager(student, block_size=b)
    table = list(bm.allocate(0, b + 1).blocks)  # t = B + 1 goes to j = 1, o = 1
    result = _append(bm, 0)
    expect(
        result.slot,
        table[1] * b + 1,
        f"append_slot(0) at t={b + 1} with T_0={table}, B={b}: slot T_0[1]*B + o",
    )
    expect(result.cow, None, f"append_slot(0).cow into block {table[1]}, which only T_0 holds")
    expect(bm.table(0).blocks, table, "T_0 after append_slot(0) (no new block)")
    expect(bm.table(0).num_tokens, b + 2, "T_0.num_tokens after append_slot(0)")


def check_full_last_block_gets_a_fresh_block(student):
    """t mod B = 0: a fresh block with R[p] = 1 becomes logical block j, and o = 0"""
    _at_each_block_size(_fresh_block, student)


def _fresh_block(student, b: int) -> None:
    bm = _manager(student, block_size=b)
    table = list(bm.allocate(0, 2 * b).blocks)  # both blocks full
    fresh = bm.device.free_blocks()[0]
    result = _append(bm, 0)
    expect(
        bm.table(0).blocks,
        [*table, fresh],
        f"T_0 after appending t={2 * b} to two full blocks of B={b}",
    )
    expect(result.slot, fresh * b + 0, f"append_slot(0).slot of t={2 * b}: T_0[2]*B + 0")
    expect(bm.refcount(fresh), 1, f"R[{fresh}], the fresh block, after append_slot(0)")
    expect(result.cow, None, "append_slot(0).cow when starting a fresh block")


def check_shared_partly_filled_block_is_copied(student):
    """R[p] > 1: allocate p_new, copy the o rows, R[p] -= 1, T_i[j] = p_new, write at o"""
    _at_each_block_size(_shared_copied, student)


def _shared_copied(student, b: int) -> None:
    bm = _manager(student, block_size=b)
    first, p = bm.allocate(0, b + 2).blocks  # block p holds 2 of B tokens
    bm.fork(0, 1)  # R[first] = R[p] = 2
    t = b + 2
    result = _append(bm, 1)  # seq 1 writes t = B + 2: j = 1, o = 2, p is shared
    if result.cow is None and result.slot // b == p:
        raise CheckFailed(
            f"append_slot(1): seq 1 wrote token t={t} (j=1, o=2) into block {p}, shared with "
            f"seq 0 (R[{p}]=2), at slot {result.slot} with no copy-on-write: seq 0's next "
            f"token would land on it. Expected cow=({p}, p_new) and a slot in p_new"
        )
    if result.cow is None:
        raise CheckFailed(
            f"append_slot(1): seq 1 moved to block {result.slot // b} for token t={t} but "
            f"returned cow=None: the caller copies only the pairs it is given, so the o=2 "
            f"tokens already written in block {p} would be missing from block "
            f"{result.slot // b}. Return cow=({p}, p_new)"
        )
    src, dst = result.cow
    expect(src, p, "the p of append_slot(1).cow = (p, p_new): the shared T_1[1]")
    expect(
        bm.table(1).blocks,
        [first, dst],
        f"T_1 after append_slot(1) copied on write to p_new={dst}",
    )
    expect(
        result.slot,
        dst * b + 2,
        f"append_slot(1).slot of t={t}: p_new*B + o = {dst}*{b} + 2",
    )
    expect(
        (bm.refcount(p), bm.refcount(dst)),
        (1, 1),
        f"(R[{p}], R[{dst}]), (R[p], R[p_new]), after append_slot(1) copied block {p}",
    )
    expect(
        bm.refcount(first),
        2,
        f"R[{first}] after append_slot(1): the full block {first} stays shared",
    )
    expect(
        bm.table(0).blocks,
        [first, p],
        "T_0 after append_slot(1): the other sequence's table does not change",
    )
    three = _manager(student, block_size=b)  # R[p] -= 1, not R[p] = 1: right for two sharers
    _, p = three.allocate(0, b + 2).blocks
    three.fork(0, 1)
    three.fork(0, 2)
    if _append(three, 1).cow is None:
        raise CheckFailed(
            f"append_slot(1) into block {p}, shared by seqs 0, 1 and 2 (R[{p}]=3), returned "
            "cow=None: a block is shared whenever R[p] > 1, whatever the count (R[p] == 2 "
            "holds for two sharers only), and a write into it must copy first"
        )
    expect(
        three.refcount(p),
        2,
        f"R[{p}] after append_slot(1) copied block {p} away from three sharers (seqs 0, 1 "
        f"and 2; R[{p}] was 3): the writer lets go of its share alone, and seqs 0 and 2 still "
        "hold it",
    )


def check_last_sharer_writes_in_place(student):
    """after one sharer copied, the other holds the block alone (R[p] = 1) and writes in place"""
    _at_each_block_size(_last_sharer, student)


def _last_sharer(student, b: int) -> None:
    bm = _manager(student, block_size=b)
    _, p = bm.allocate(0, b + 2).blocks
    bm.fork(0, 1)
    _append(bm, 1)
    free_before = bm.device.num_free
    result = _append(bm, 0)
    expect(
        result.cow,
        None,
        f"append_slot(0).cow into block {p} once seq 1 has its own copy (R[{p}]=1)",
    )
    expect(result.slot, p * b + 2, f"append_slot(0).slot for t={b + 2}")
    expect(
        bm.device.num_free,
        free_before,
        "device.num_free before and after append_slot(0), an in-place write",
    )


def check_full_shared_blocks_are_not_copied(student):
    """a fork at a block boundary copies nothing: the new token starts a fresh block"""
    _at_each_block_size(_full_shared, student)


def _full_shared(student, b: int) -> None:
    bm = _manager(student, block_size=b)
    table = list(bm.allocate(0, 2 * b).blocks)
    bm.fork(0, 1)
    result = _append(bm, 1)
    expect(
        result.cow,
        None,
        f"append_slot(1).cow of t={2 * b}, after its two full shared blocks",
    )
    expect(
        bm.table(1).blocks[:2], table, "T_1[:2] after append_slot(1): the full blocks stay shared"
    )
    expect(
        tuple(bm.refcount(p) for p in table),
        (2, 2),
        f"(R[{table[0]}], R[{table[1]}]) after append_slot(1)",
    )


def check_out_of_blocks_changes_nothing(student):
    """with no free block, an append that needs one raises OutOfBlocks and changes nothing"""
    _at_each_block_size(_out_of_blocks, student)


def _out_of_blocks(student, b: int) -> None:
    bm = _manager(student, 2, block_size=b)
    _, p = bm.allocate(0, b + 2).blocks
    bm.fork(0, 1)  # the pool is full; block p is shared and partly filled
    _refused_append(
        bm,
        1,
        f"append_slot(1) into shared block {p} with no free block for its copy",
        f"append_slot(1) into shared block {p} with no free block returned instead of raising "
        "OutOfBlocks: copy-on-write needs a p_new, and the pool has none",
    )
    bm = _manager(student, 2, block_size=b)
    (first,) = bm.allocate(0, b).blocks
    bm.allocate(1, b)  # the pool is full; both last blocks are full
    _refused_append(
        bm,
        0,
        f"append_slot(0) of t={b} after the full block {first}, with no free block",
        f"append_slot(0) of t={b} after the full block {first} returned instead of raising "
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
