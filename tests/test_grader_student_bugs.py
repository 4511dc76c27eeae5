"""Realistic student bugs that once passed every criterion of their exercise, each now failing
the criterion written for it with its cause named (the grader's contract, §1: every realistic
bug is caught; tests/test_exercises.py holds the rest): here the block tables, allocator, block
manager and scheduler of exercises 01-05 and exercise 13's wastes, and student code that ends
or waits instead of returning, each a failed check rather than a stopped grading process.
Exercise 12's radix trees are in test_grader_student_bugs_prefix_cache.py, the attention loop
and kernels of exercises 07, 10 and 11 in test_grader_student_bugs_attention.py.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_exercises import failures_of, starter_with

from minipaged import allocator, memory, scheduler
from minipaged.block_manager import BlockManager
from minipaged.grader.grading import grade
from minipaged.grader.report import PASS, split_rule

# The library's code handed in as a student's: the copy check that would refuse it is off.
pytestmark = pytest.mark.usefixtures("library_code_allowed")


def test_float_division_in_block_arithmetic_is_named():
    """t / B is exact for every small t; past 2**53 a float rounds, and j or M is off by one."""
    student = SimpleNamespace(**vars(memory))
    student.logical_block = lambda t, block_size: int(t / block_size)
    student.num_logical_blocks = lambda num_tokens, block_size: math.ceil(num_tokens / block_size)
    failed = failures_of(1, ["logical_block", "num_logical_blocks"], memory=student)
    assert list(failed) == ["logical_block", "num_logical_blocks"]
    for message in failed.values():
        assert "what float division gives" in message and "use integers only" in message


class _Fp16Bytes(memory.ModelShape):
    """M_KV(L) written with FP16's b = 2 bytes, as in every model of the README."""

    def kv_bytes(self, num_tokens):
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * num_tokens * 2


class _BlockOf16(memory.ModelShape):
    """One block's bytes written from §3's example, B = 16, whatever block_size is given."""

    def block_bytes_per_layer(self, block_size):
        return 2 * self.num_kv_heads * self.head_dim * 16 * self.dtype_bytes


@pytest.mark.parametrize(
    ("cls", "criterion", "words"),
    [
        (_Fp16Bytes, "kv_bytes", "it counts b = 2 bytes a value, but this shape's cache is FP8"),
        (_BlockOf16, "block_bytes", "the bytes of a block of 16 tokens (§3's example); use"),
    ],
    ids=["fp16-bytes", "block-of-16"],
)
def test_a_byte_count_right_for_llama_alone_is_caught(cls, criterion, words):
    """Every byte count was once checked on b = 2 shapes and block_bytes at B = 16 only."""
    student = SimpleNamespace(**vars(memory))
    student.ModelShape = cls
    failed = failures_of(1, ["kv_bytes", "block_bytes"], memory=student)
    assert list(failed) == [criterion]
    assert words in failed[criterion]


class _IncrefWraps(allocator.BlockAllocator):
    """incref without the range check: Python's list makes block -1 the pool's last block."""

    def incref(self, block):
        if self._refcounts[block] == 0:
            raise ValueError(f"block {block} is free")
        self._refcounts[block] += 1
        return self._refcounts[block]


def test_a_block_id_that_wraps_around_is_refused_by_every_method():
    module = SimpleNamespace(BlockAllocator=_IncrefWraps, OutOfBlocks=allocator.OutOfBlocks)
    failed = failures_of(2, ["misuse_is_refused"], allocator=module)
    assert failed["misuse_is_refused"].startswith(
        "incref(-1) in a pool of blocks 0..1 (a negative id must not wrap): expected IndexError, "
        "but it returned 2"
    )


class _FreesFirstBlockFirst(BlockManager):
    def free(self, seq):
        table = self.table(seq)
        pool = self.device if table.pool == "device" else self.host
        for block in table.blocks:
            pool.decref(block)
        del self.tables[seq]


def test_free_releasing_the_first_block_first_is_caught():
    """The free list then ends with a prefix's root: a prefix cache would lose it first."""
    module = SimpleNamespace(BlockManager=_FreesFirstBlockFirst)
    names = ["free_releases_the_last_block_first", "free_releases_only_unshared_blocks"]
    failed = failures_of(3, names, block_manager=module)
    assert list(failed) == ["free_releases_the_last_block_first"]
    assert "released block 0 first" in failed["free_releases_the_last_block_first"]


class _SwapsTableByTable(BlockManager):
    """Checks the host pool's room one table at a time, so a group that does not fit is
    half moved when the refusal comes."""

    def swap_out(self, seqs):
        pairs = []
        for seq in seqs:
            pairs += super().swap_out([seq])
        return pairs


class _SwapsInWhatIsOnTheHost(BlockManager):
    """Skips a sequence on the device instead of refusing it."""

    def swap_in(self, seqs):
        return super().swap_in([seq for seq in seqs if self.table(seq).pool == "host"])


@pytest.mark.parametrize(
    ("cls", "criterion", "words"),
    [
        (
            _SwapsTableByTable,
            "swaps_that_do_not_fit_are_refused",
            "tables[0].pool: expected 'device', got 'host'",
        ),
        (
            _SwapsInWhatIsOnTheHost,
            "swap_in_refuses_a_sequence_on_the_device",
            "swap_in([0]) of seq 0, on the device: expected ValueError, but it returned",
        ),
    ],
    ids=["group-checked-table-by-table", "device-sequence-skipped"],
)
def test_a_swap_refused_too_late_or_not_at_all_is_caught(cls, criterion, words):
    failed = failures_of(5, [criterion], block_manager=SimpleNamespace(BlockManager=cls))
    assert words in failed[criterion]


class _SwapsWheneverThereIsAHost(scheduler.Scheduler):
    """Reads "a host pool" as "swap", whatever the policy."""

    def _preempt(self, group, out):
        policy = self.preemption
        self.preemption = "swap" if self.block_manager.host else policy
        try:
            super()._preempt(group, out)
        finally:
            self.preemption = policy


def test_the_recompute_policy_swapping_a_single_sequence_is_caught():
    name = "recompute_frees_the_blocks_and_requeues"
    module = SimpleNamespace(Scheduler=_SwapsWheneverThereIsAHost)
    failed = failures_of(5, [name], scheduler=module)
    assert "with host room to spare" in failed[name]
    assert split_rule(failed[name])[0].endswith("expected 'recompute', got 'swap'")


def test_an_append_result_of_the_wrong_type_is_named():
    class ReturnsTuple(BlockManager):
        def append_slot(self, seq, token_ids=None):
            result = super().append_slot(seq, token_ids)
            return result.slot, result.cow

    module = SimpleNamespace(BlockManager=ReturnsTuple)
    name = "append_writes_in_place_when_the_block_has_room"
    failed = failures_of(4, [name], block_manager=module)
    assert split_rule(failed[name])[0] == (
        "append_slot(0) returned (5, None) (tuple); return AppendResult(slot, cow), with "
        "cow=None or the (p, p_new) to copy"
    )


def test_exit_input_and_a_print_without_newline_each_fail_or_pass_one_check(tmp_path):
    """sys.exit() fails its check and the grading goes on; input() gets no input and fails at
    once; a print without a newline neither hides the next result nor fails anything."""
    folder = starter_with(tmp_path, "return j = floor(t / B)", "import sys; sys.exit(0)")
    source = (folder / "memory.py").read_text()
    for todo, code in [
        ("return o = t mod B", "return int(input('o? '))"),
        ("return M = ceil(L / B)", "print('M', end=''); return -(-num_tokens // block_size)"),
    ]:
        source = source.replace(f'raise NotImplementedError("exercise 01: {todo}")', code)
    (folder / "memory.py").write_text(source)
    results = {r.name: r for r in grade(1, folder).results}
    assert results["logical_block"].message.startswith("your code called sys.exit(0) (memory.py")
    assert results["block_offset"].message.startswith("your code read input (input() or sys.std")
    assert results["num_logical_blocks"].outcome == PASS
    assert results["block_bytes"].message.startswith("not written yet")


class _CowLeavesOneSharer(BlockManager):
    """Copy-on-write that leaves the old block to "the other" sharer, R[p] set to 1: right
    with two sharers (parallel sampling with n = 2), wrong with three."""

    def append_slot(self, seq, token_ids=None):
        table = self.table(seq)
        src = table.blocks[-1]
        shared = not table.is_last_block_full and self.device.refcount(src) > 1
        result = super().append_slot(seq, token_ids)
        while shared and self.device.refcount(src) > 1:
            self.device.decref(src)
        return result


def test_copy_on_write_that_assumes_two_sharers_is_caught():
    """It once failed only the random programs; the criterion for the copy now forks twice."""
    name = "shared_partly_filled_block_is_copied"
    failed = failures_of(4, [name], block_manager=SimpleNamespace(BlockManager=_CowLeavesOneSharer))
    assert split_rule(failed[name])[0].startswith(
        "R[1] after append_slot(1) copied block 1 away from three sharers"
    )
    assert split_rule(failed[name])[0].endswith("expected 2, got 1")


class _IncrefMarksShared(allocator.BlockAllocator):
    """incref marks a block shared, R[p] = 2, whatever it was: right for a second table,
    wrong for a third."""

    def incref(self, block):
        super().incref(block)
        self._refcounts[block] = 2
        return 2


def test_an_incref_that_sets_two_is_caught_by_the_counting_criterion():
    """It once failed only the block-manager programs; the criterion for counting now
    shares a block three ways."""
    module = SimpleNamespace(BlockAllocator=_IncrefMarksShared, OutOfBlocks=allocator.OutOfBlocks)
    name = "incref_and_decref_count_tables"
    failed = failures_of(2, [name], allocator=module)
    assert split_rule(failed[name])[0] == (
        "incref(0) with R[0]=2 (a third table shares it): the new R: expected 3, got 2"
    )


class _HostRefcountIsTheGroupSize(BlockManager):
    """Every host block of a swapped group gets R = the number of sequences swapped: right
    when they share every block, as right after a fork, wrong once one has copied on write."""

    def swap_out(self, seqs):
        seqs = list(seqs)
        pairs = super().swap_out(seqs)
        for _, host_block in pairs:
            while self.host.refcount(host_block) < len(seqs):
                self.host.incref(host_block)
            while self.host.refcount(host_block) > len(seqs):
                self.host.decref(host_block)
        return pairs


def test_a_swap_that_counts_the_group_and_not_the_holders_is_caught():
    """It once failed only the random programs: the group the criterion swapped shared all its
    blocks. Now one of the two has copied its last block on write first."""
    name = "a_block_shared_inside_the_group_is_copied_once"
    module = SimpleNamespace(BlockManager=_HostRefcountIsTheGroupSize)
    failed = failures_of(5, [name], block_manager=module, scheduler=scheduler)
    assert "R[p] counts the tables that hold p, not the sequences swapped" in failed[name]
    assert split_rule(failed[name])[0].endswith(
        "swapped: [1]: expected 1, got 2; [2]: expected 1, got 2"
    )


class _HostRefcountCopiedFromTheDevice(BlockManager):
    """Each host copy gets the R its device block had: right when every holder is swapped
    together, wrong when one of two sharers is swapped alone."""

    def swap_out(self, seqs):
        seqs = list(seqs)
        held = {p: self.device.refcount(p) for seq in seqs for p in self.table(seq).blocks}
        pairs = super().swap_out(seqs)
        for device_block, host_block in pairs:
            while self.host.refcount(host_block) < held[device_block]:
                self.host.incref(host_block)
        return pairs


def test_a_swap_that_copies_the_device_refcount_is_caught():
    """It once failed only the random programs (refcount conservation); the criterion that
    swaps one of two sharers now reads the copies' R."""
    name = "swapping_one_sharer_out_frees_nothing"
    module = SimpleNamespace(BlockManager=_HostRefcountCopiedFromTheDevice)
    failed = failures_of(5, [name], block_manager=module, scheduler=scheduler)
    assert split_rule(failed[name])[0].startswith(
        "host R of T_1=[0, 1], the copies, after fork(0, 1), swap_out([1]): R[p] counts the "
        "tables that hold p"
    )
    assert split_rule(failed[name])[0].endswith("expected [1, 1], got [2, 2]")


def test_newcomers_placed_in_the_order_a_step_lists_them_are_caught():
    """Every run once listed a step's sequences by id (the engine's tables and the generated
    runs alike), so placing newcomers as the step lists them passed every criterion; a run
    listing them out of order, and generated runs in shuffled order, now show it."""
    path = Path(__file__).parent / "student_answers/ex13/step_order/recorded_waste.py"
    spec = importlib.util.spec_from_file_location("step_order", path)
    answer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(answer)
    name = "fragmentation_stalls_of_a_recorded_run"
    failed = failures_of(13, [name], recorded_waste=answer, memory=memory)
    assert "listed 5 first: they ask in order of id" in failed[name]
    assert "expected the stalls (step, sequence) [], got [(2, 4)]" in failed[name]
