"""Realistic student bugs that only show at a size the fixed cases did not reach: a block size
other than the examples' B = 4, a step that preempts two requests, a host pool with some room
but not enough, or exactly enough, a reduction over more than one warp, a block id past 255,
three sharers of a block, a fork in a full pool, a length past 2**53. Each passed the
criterion it breaks (or failed it with a message about something else); each now fails it
with the size and the cause named (the other realistic bugs: test_grader_student_bugs.py,
..._attention.py, ..._prefix_cache.py).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch
from test_exercises import failures_of
from test_grader_student_bugs import swap_finding
from test_grader_student_bugs_attention import kernel_with, loop_failures

from minipaged import attention, memory, scheduler
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AppendResult, BlockManager
from minipaged.grader import bug_zoo, drawn_sizes
from minipaged.grader import ex04_copy_on_write as ex04
from minipaged.grader.grading import grade
from minipaged.grader.report import FAIL, split_rule

# The library's code handed in as a student's: the copy check that would refuse it is off.
pytestmark = pytest.mark.usefixtures("library_code_allowed")


def draw(monkeypatch, size) -> None:
    """Make every size drawn for this grading ``size``."""
    monkeypatch.setattr(drawn_sizes.DRAWS, "choice", lambda sizes: size)


class _BlockOfFour(BlockManager):
    """append_slot written with the README's B = 4 for the manager's B: j, o = divmod(t, 4)
    and slot = T_r[j] * 4 + o."""

    def append_slot(self, seq, token_ids=None):
        t = self.table(seq).num_tokens
        result = super().append_slot(seq, token_ids)
        j, o = divmod(t, 4)
        return AppendResult(self.table(seq).blocks[j] * 4 + o, result.cow)


@pytest.mark.parametrize("block_size", ex04.DRAWN_BLOCK_SIZES)
def test_an_append_written_for_a_block_of_four_is_caught_at_the_drawn_b(monkeypatch, block_size):
    """Every case of exercise 04 was at B = 4, so an append computing with 4 passed them all.
    The cases run again at a B drawn for the grading, with tables that do not start at block
    0 (there, T_r[j] * B + o is t whatever B); the message names the B drawn."""
    draw(monkeypatch, block_size)
    name = "append_writes_in_place_when_the_block_has_room"
    failed = failures_of(4, [name], block_manager=SimpleNamespace(BlockManager=_BlockOfFour))
    drawn = (
        f"with B={block_size}, drawn for this grading (the same case passed with B=4: is a "
        "number that holds only there written where B belongs?)"
    )
    assert drawn in failed[name]
    if block_size >= 7:  # t = B + 1 read as B = 4 is in block 2, past the table's end
        assert failed[name].startswith(
            f"IndexError: list index out of range, in the check's call bm.append_slot(seq), "
            f"{drawn}\nRule: "
        )
    if block_size == 5:  # t = 6: j = 1, o = 2 read as B = 4, where j = 1, o = 1 at B = 5
        assert split_rule(failed[name])[0] == (
            f"{drawn}: append_slot(0) at t=6 with T_0=[1, 2], B=5: slot T_0[1]*B + o: "
            "expected 11, got 10"
        )


class _AssignsTheCopies(scheduler.Scheduler):
    """out.blocks_to_swap_out = bm.swap_out(ids): the step's copies replaced by this victim's,
    right while a step preempts one request."""

    def _preempt(self, group, out):
        copies = len(out.blocks_to_swap_out)
        super()._preempt(group, out)
        out.blocks_to_swap_out = out.blocks_to_swap_out[copies:]


class _AssignsTheVictims(scheduler.Scheduler):
    """out.preempted = [group]: the step's victims replaced by this one."""

    def _preempt(self, group, out):
        super()._preempt(group, out)
        out.preempted = [group]


@pytest.mark.parametrize(
    ("cls", "criterion", "words"),
    [
        (
            _AssignsTheCopies,
            "swap_preemption_moves_the_blocks_to_host",
            "holds 2 copies, b's alone, expected 3: c's 1 block and b's 2",
        ),
        (
            _AssignsTheVictims,
            "recompute_frees_the_blocks_and_requeues",
            "recompute: out.preempted of the schedule() that preempted two requests, c then b "
            "(a needed a block, then b did, with 5 device blocks all held) is ['b'], expected "
            "['c', 'b']",
        ),
    ],
    ids=["copies", "victims"],
)
def test_a_preempt_that_assigns_the_steps_lists_is_caught(cls, criterion, words):
    """Every scene of exercise 05 preempted one request a step, so a _preempt that assigned
    out.preempted or out.blocks_to_swap_out where it should add to them passed. A scene where
    one step preempts two requests now shows it."""
    failed = failures_of(5, [criterion], scheduler=SimpleNamespace(Scheduler=cls))
    assert words in failed[criterion]


def _room_decided_by(has_room):
    """A scheduler whose _preempt decides the host's room by ``has_room(bm, ids)`` in place of
    ``bm.can_swap_out(ids)``."""

    class Scheduler(scheduler.Scheduler):
        def _preempt(self, group, out):
            bm = self.block_manager
            bm.can_swap_out = lambda ids: bm.host is not None and has_room(bm, ids)
            try:
                super()._preempt(group, out)
            finally:
                del bm.can_swap_out

    return Scheduler


def _blocks_of(bm, ids) -> int:
    return len({p for seq in ids for p in bm.table(seq).blocks})


_SwapsWhenTheHostHasAFreeBlock = _room_decided_by(lambda bm, ids: bm.host.num_free > 0)
_SwapsWhenTheHostHasBlocksToSpare = _room_decided_by(
    lambda bm, ids: bm.host.num_free > _blocks_of(bm, ids)
)


def test_a_swap_decided_by_one_free_host_block_is_caught():
    """The host pools of exercise 05's scenes held none of the victim's blocks or all of them,
    so any test of "room" passed; a host of 1 block for b's 2 now shows it."""
    name = "swap_falls_back_to_recompute_without_host_room"
    module = SimpleNamespace(Scheduler=_SwapsWhenTheHostHasAFreeBlock)
    failed = failures_of(5, [name], scheduler=module)
    assert "with a host pool of 1 block and b holding 2, raised OutOfBlocks" in failed[name]
    assert "ask bm.can_swap_out(ids)" in failed[name]


def test_a_swap_that_wants_a_block_to_spare_is_caught():
    """No scene had a host of exactly the victim's blocks: 'num_free > needed' for '>=' passed.
    A host of exactly b's 2 blocks must now take them."""
    name = "swap_preemption_moves_the_blocks_to_host"
    module = SimpleNamespace(Scheduler=_SwapsWhenTheHostHasBlocksToSpare)
    failed = failures_of(5, [name], scheduler=module)
    assert split_rule(failed[name])[0].endswith(
        "with a host pool of exactly b's 2 blocks (room enough: swap when the host has as many "
        "free blocks as the group needs): expected 'swap', got 'recompute'"
    )


@pytest.mark.slow
def test_a_tree_written_for_one_warp_is_caught_at_the_drawn_thread_count(tmp_path):
    """Exercise 10's reductions all ran 32 threads a block, so a tree starting at stride 16
    passed them. The dot product now runs again with 64 or 128 threads, drawn at each grading;
    the message names T and says that every thread agreed on a wrong sum."""
    line = "        stride = scratch.shape[0] // 2\n"
    kernel_with(tmp_path, "block_reduce.py", line, "        stride = 16  # one warp\n")
    failed = {r.name: r.message for r in grade(10, tmp_path).results if r.outcome == FAIL}
    assert list(failed) == ["dot_product"]
    assert re.search(r"^with T=(64|128), drawn for this grading \(", failed["dot_product"])
    assert "every thread got" in failed["dot_product"]
    assert "not a number written for 32 threads" in failed["dot_product"]


class _CopiesWhenTwoShare(BlockManager):
    """Copy-on-write when R[p] == 2, the two sharers of n = 2 parallel sampling; with more
    sharers it writes in place, into the block the others still read."""

    def append_slot(self, seq, token_ids=None):
        table = self.table(seq)
        if not table.is_last_block_full and self.device.refcount(table.blocks[-1]) > 2:
            return bug_zoo.MissingCow.append_slot(self, seq, token_ids)
        return super().append_slot(seq, token_ids)


def test_copy_on_write_only_for_two_sharers_is_named_as_such():
    """It failed the three-sharer case with "R[1] after append_slot(1) copied block 1 away from
    three sharers ...: expected 2, got 3", about a copy that never happened."""
    name = "shared_partly_filled_block_is_copied"
    failed = failures_of(4, [name], block_manager=SimpleNamespace(BlockManager=_CopiesWhenTwoShare))
    assert split_rule(failed[name])[0] == (
        "append_slot(1) into block 1, shared by seqs 0, 1 and 2 (R[1]=3), returned cow=None: a "
        "block is shared whenever R[p] > 1, whatever the count (R[p] == 2 holds for two sharers "
        "only), and a write into it must copy first"
    )


def _table_of_bytes(query, key_pool, value_pool, block_tables, seq_lens, scale, block_size):
    """Exercise 07's loop reading the block table as uint8, a byte a block id: right for the
    pools of fewer than 256 blocks every case had."""
    tables = block_tables.to(torch.uint8).to(torch.int32)
    return attention.paged_attention_decode_loop(
        query, key_pool, value_pool, tables, seq_lens, scale, block_size
    )


def test_a_loop_reading_block_ids_as_bytes_is_caught():
    """Every pool of exercise 07 held fewer than 20 blocks, and no table more than 4; a
    sequence over 11 blocks of a pool of 300 now shows a block id cut to a byte, and the NaN it
    reads is traced to a block no table holds, not to slots past the sequence's end."""
    name = "loop_follows_the_block_table"
    failed = loop_failures(_table_of_bytes, name)
    assert "on one sequence over 11 blocks scattered in a pool of 300" in failed[name]
    assert "reads a block its table does not hold" in failed[name]
    assert "a block id cut to fewer bits (a uint8 holds 0..255" in failed[name]


class _CountsEveryTablesBlocks(BlockManager):
    """Checks the host's room by adding up the group's tables, so a block two of them share
    counts twice: right whenever the host has room to spare."""

    def swap_out(self, seqs):
        seqs = list(seqs)
        needed = sum(len(self.table(seq).blocks) for seq in seqs)
        if self.host is not None and needed > self.host.num_free:
            raise OutOfBlocks(f"the group needs {needed} host blocks")
        return super().swap_out(seqs)


def test_a_room_check_that_counts_shared_blocks_twice_is_caught():
    """Every swap of exercise 05 that had to succeed had host room to spare, and those that had
    to be refused lacked a block or more; a group of two sharers into a host of exactly their
    2 distinct blocks now shows a count that takes a shared block twice."""
    name = "a_block_shared_inside_the_group_is_copied_once"
    assert swap_finding(_CountsEveryTablesBlocks, name).startswith(
        "swap_out([0, 1]) of two sequences sharing 2 full blocks (8 tokens, B=4), into a host "
        "pool of exactly 2 free blocks, raised OutOfBlocks: the group needs one block per "
        "distinct block, 2"
    )


class _KeepsOneBlockSpare(BlockManager):
    """Refuses an append that needs a block unless two are free: num_free <= 1 for == 0."""

    def append_slot(self, seq, token_ids=None):
        table = self.table(seq)
        needs = table.is_last_block_full or self.device.refcount(table.blocks[-1]) > 1
        if needs and self.device.num_free <= 1:
            raise OutOfBlocks(f"sequence {seq} needs a block and none is free")
        return super().append_slot(seq, token_ids)


class _SwapsInWithOneBlockSpare(BlockManager):
    """Refuses a swap that would leave the device no block free: needed >= num_free."""

    def swap_in(self, seqs):
        seqs = list(seqs)
        needed = len({p for seq in seqs for p in self.table(seq).blocks})
        if needed >= self.device.num_free:
            raise OutOfBlocks(f"the group needs {needed} device blocks")
        return super().swap_in(seqs)


def test_a_room_check_off_by_one_is_caught_where_the_pool_fits_exactly():
    """Every append or swap of exercises 04 and 05 that had to succeed had blocks to spare;
    one that takes the last free block now shows the off-by-one."""
    failed = failures_of(
        4,
        ["full_last_block_gets_a_fresh_block", "shared_partly_filled_block_is_copied"],
        block_manager=SimpleNamespace(BlockManager=_KeepsOneBlockSpare),
    )
    for message in failed.values():
        assert "with exactly 1 free block, raised OutOfBlocks: one free block is enough" in message
    assert len(failed) == 2
    found = swap_finding(
        _SwapsInWithOneBlockSpare, "a_block_shared_inside_the_group_is_copied_once"
    )
    assert found.startswith("swap_in([0, 1]) of two sequences sharing 2 full blocks (8 tokens")
    assert "into a device pool of exactly 2 free blocks, raised OutOfBlocks" in found
    assert "Refuse only when fewer are free than needed" in found


def _slot_by_a_shift(table, t, block_size):
    """slot with T_r[j] * B written as a shift by log2(B): right for B = 4 and 16."""
    j, o = divmod(t, block_size)
    return (table[j] << (block_size.bit_length() - 1)) + o


def _slot_of_a_byte(table, t, block_size):
    """slot reading the table as bytes: right for tables of ids below 256."""
    j, o = divmod(t, block_size)
    return bytearray(p % 256 for p in table)[j] * block_size + o


@pytest.mark.parametrize(
    ("slot", "words"),
    [
        (_slot_by_a_shift, "B=3) gave 10, T_r[j] shifted by log2(B) plus o"),
        (_slot_of_a_byte, "B=1) gave 44, the slot of block 44: block 300 cut to a byte"),
    ],
    ids=["shift", "byte"],
)
def test_a_slot_right_for_the_examples_alone_is_caught(slot, words):
    """Exercise 01's slot cases were §3's example (B = 16) and a table of 3 blocks at B = 4:
    a shift for the product and a byte for a block id passed both. The slot now runs at every
    block size of the other criteria, over a table of 10 blocks with ids past 255."""
    module = SimpleNamespace(**vars(memory))
    module.slot = slot
    failed = failures_of(1, ["slot"], memory=module)
    assert words in failed["slot"]


class _ForksWhenThereIsRoom(BlockManager):
    """fork refusing unless the pool could hold a copy of the parent's blocks, which it never
    makes: right in every pool with blocks to spare."""

    def fork(self, parent, child):
        needed = len(self.table(parent).blocks)
        if self.device.num_free < needed:
            raise OutOfBlocks(f"fork needs {needed} free blocks")
        return super().fork(parent, child)


def test_a_fork_that_wants_free_blocks_is_named():
    """Exercise 03's pools all had blocks to spare: only its random programs caught a fork
    that asks for room, with a program's trace. Its refcount criterion now forks in a full
    pool and names the cause."""
    name = "fork_raises_each_refcount_by_one"
    module = SimpleNamespace(BlockManager=_ForksWhenThereIsRoom)
    failed = failures_of(3, [name], block_manager=module)
    assert failed[name].startswith(
        "fork(0, 1) in a pool of 2 blocks, both held by T_0=[0, 1] (none free) raised "
        "OutOfBlocks (fork needs 2 free blocks): fork needs no free block"
    )


def _waste_by_float_ceiling(x, unit):
    """ceil(x / unit) * unit - x with a float quotient: right below 2**53."""
    return math.ceil(x / unit) * unit - x


@pytest.mark.parametrize(
    ("formula", "call"),
    [
        ("paged_internal_waste", "paged_internal_waste(L=2**60 + 1, B=16): got -1"),
        ("reservation_waste", "reservation_waste(t=2**60 + 1, ΔL=16): got -1"),
    ],
)
def test_a_waste_of_a_float_ceiling_is_caught(formula, call):
    """Exercise 13's waste formulas ran L and t below 3B + 2 and §2's 500: math.ceil(L / B)
    passed. Exercise 01 refuses it at 2**60; now exercise 13 does too, naming the cause."""
    module = SimpleNamespace(**vars(memory))
    setattr(module, formula, _waste_by_float_ceiling)
    failed = failures_of(13, [formula], memory=module)
    assert failed[formula].startswith(f"{call}, what float division gives")
    assert "expected 15: use integers only (//, not /)" in failed[formula]
