"""Realistic student bugs that once passed every criterion of their exercise, each now failing
the criterion written for it with its cause named (the grader's contract, §1: every realistic
bug is caught; tests/test_exercises.py holds the rest), and student code that ends or waits
instead of returning, each a failed check rather than a stopped grading process.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_exercises import as_written_by_a_student, failures_of, starter_with

from minipaged import allocator, attention, memory, radix_cache, scheduler
from minipaged.block_manager import BlockManager
from minipaged.grader.grading import failure_message, grade
from minipaged.grader.report import FAIL, PASS, split_rule
from minipaged.grader.shared_memory_races import RaceLog
from minipaged.grader.student import Student

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


def kernel_with(folder: Path, name: str, line: str, bug: str) -> None:
    """The library's kernel file ``name`` in ``folder``, with ``line`` replaced by ``bug``."""
    import cuda_kernels

    source = (Path(cuda_kernels.__file__).parent / name).read_text()
    assert line in source
    (folder / name).write_text(as_written_by_a_student(source.replace(line, bug)))


@pytest.mark.slow
def test_a_decode_kernel_covering_only_t_dimensions_is_caught(tmp_path):
    """Thread t accumulating dimension t alone is right while head_dim <= T, as in every other
    simulator case; head_dim = T + 16 shows the dimensions it never updates."""
    loop = "            for d in range(thread, head_dim, num_threads):\n                total ="
    one = "            for d in range(thread, min(thread + 1, head_dim)):\n                total ="
    kernel_with(tmp_path, "paged_attention.py", loop, one)
    results = {r.name: r for r in grade(11, tmp_path).results}
    failed = {name for name, r in results.items() if r.outcome == FAIL}
    assert failed == {"decode_head_dim_wider_than_the_threads"}
    message = results["decode_head_dim_wider_than_the_threads"].message
    assert "dimensions 32..47 are wrong, the first 32 right" in message


def test_a_thread_indexing_past_an_array_in_the_simulator_is_named():
    """The simulator raises IndexError where a GPU would silently read or write out of bounds."""
    error = IndexError("tid=[20, 0, 0] ctaid=[0, 0, 0]: index 5 is out of bounds for axis 1")
    message = failure_message(error, Student({}))
    assert message.startswith("IndexError: tid=[20, 0, 0]")
    assert "a thread indexed past an array's end" in message
    assert "indexed past" not in failure_message(IndexError("list index"), Student({}))


def test_threads_that_passed_different_numbers_of_barriers_are_named():
    log = RaceLog()
    for thread, passed in ((0, 3), (1, 3), (2, 2)):
        log.finish((0, 0, 0), thread, passed)
    log.finish((1, 0, 0), 0, 2)
    assert log.divergent_barriers() == [
        "in thread block [0, 0, 0], thread 0 passed 3 cuda.syncthreads() and thread 2 only 2: a "
        "barrier that not every thread reaches (inside an if, or a loop whose trip count "
        "differs by thread). On a GPU the block then hangs or goes wrong; put each "
        "cuda.syncthreads() where every thread of the block passes it"
    ]


@pytest.mark.slow
def test_a_barrier_only_some_threads_reach_fails_the_race_check(tmp_path):
    """The simulator lets the other threads' exit release a barrier; a GPU does not."""
    barrier = "        cuda.syncthreads()  # every thread has read scratch[0] before the next"
    half = "        if thread < 16:\n            cuda.syncthreads()  # only some threads:"
    kernel_with(tmp_path, "block_reduce.py", barrier, half)
    failed = {r.name: r.message for r in grade(10, tmp_path).results if r.outcome == FAIL}
    assert "passed 14 cuda.syncthreads() and thread" in failed["no_shared_memory_race"]


# -- exercise 12: a radix tree whose structure is wrong ------------------------------------------
# Each tree answers the fixed criteria's first calls right; what is wrong is where a block sits:
# the tree spells another prefix than the one the block holds, and only a later lookup (or the
# structure check after every operation) shows it.


class _NeverSplits(radix_cache.RadixCache):
    """A sequence leaving an edge partway gets its new edge below the whole edge: no split."""

    def _split(self, node, k):
        pass


class _SplitsAtTheDepth(radix_cache.RadixCache):
    """The split point counted from the root (the chunks matched in all), not from the start
    of the edge: the same on an edge below the root, past the parting chunk on any deeper."""

    def _split(self, node, k):
        above, depth = node.parent, 0
        while above is not None:
            above, depth = above.parent, depth + len(above.blocks)
        super()._split(node, k + depth)


class _SplitsOneEarly(radix_cache.RadixCache):
    """The split index taken as the last matching chunk, k - 1, rather than the first that
    differs: the new edge hangs one chunk above its prefix's end."""

    def _split(self, node, k):
        super()._split(node, max(k - 1, 1))


class _WalksOnlyWholeEdges(radix_cache.RadixCache):
    """The walk enters a child only when the sequence covers its whole edge: a shorter one
    stops above it, and insert puts a second child under the same first chunk, replacing the
    first with its whole subtree (a duplicate child)."""

    def _walk(self, chunks):
        node, k, matched = super()._walk(chunks)
        while node is not self.root and len(matched) - k + len(node.blocks) > len(chunks):
            matched, node = matched[: len(matched) - k], node.parent
            k = len(node.blocks)
        return node, k, matched


class _ForgetsTheWholeEdge(radix_cache.RadixCache):
    """forget drops the node of p with every block on its edge, those before p too: blocks
    that running sequences hold, whose prefixes are still valid, leave the cache."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is None:
            return False
        self._drop(node)
        del node.parent.children[node.chunks[0]]
        return True


class _ForgetsOnlyLeaves(radix_cache.RadixCache):
    """forget refuses a block with prefixes below it ("evict the leaves first"), though the
    allocator has already handed it out: a later hit shares its new contents."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is not None and (node.children or node.blocks[-1] != block):
            return False
        return super().forget(block)


class _ForgetKeepsTheLeaves(radix_cache.RadixCache):
    """forget cuts the edge at p but keeps the children below it: the leaves outlive their
    evicted parent and are found after the shorter prefix."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is None:
            return False
        i = node.blocks.index(block)
        for gone in node.blocks[i:]:
            del self._node_of[gone]
        del node.blocks[i:], node.chunks[i:]
        if not node.blocks:
            del node.parent.children[next(k for k, v in node.parent.children.items() if v is node)]
        return True


@pytest.mark.parametrize(
    ("cls", "criterion", "words"),
    [
        (
            _NeverSplits,
            "diverging_insert_splits_an_edge",
            "after insert([1, 2, 3, 4, 7, 7], [0, 1, 5]) the tree is broken: block 5 ends prefix "
            "[[1, 2], [3, 4], [5, 6], [7, 7]] in your tree, but it holds the last chunk of "
            "[[1, 2], [3, 4], [7, 7]]: the path to it runs through chunks that are not its "
            "prefix's: split the edge",
        ),
        (_SplitsAtTheDepth, "random_operations_match_the_contract", "raised IndexError"),
        (
            _SplitsOneEarly,
            "diverging_insert_splits_an_edge",
            "block 5 ends prefix [[1, 2], [7, 7]] in your tree, but it holds the last chunk of "
            "[[1, 2], [3, 4], [7, 7]]: it hangs above where its prefix ends",
        ),
        (_WalksOnlyWholeEdges, "random_operations_match_the_contract", "expected"),
        (
            _ForgetsTheWholeEdge,
            "forget_cuts_the_subtree",
            "block 0, before block 1 on its edge, went too",
        ),
        (_ForgetsOnlyLeaves, "forget_cuts_the_subtree", "forget may not refuse it"),
        (_ForgetKeepsTheLeaves, "forget_cuts_the_subtree", "2 and 5 ran through 1"),
    ],
    ids=lambda x: getattr(x, "__name__", "")[1:24],
)
def test_a_radix_tree_with_a_block_in_the_wrong_place_fails_with_the_cause(cls, criterion, words):
    module = SimpleNamespace(RadixCache=cls, RadixNode=radix_cache.RadixNode)
    failed = failures_of(12, [criterion], radix_cache=module)
    assert words in failed[criterion], failed


class _ComparesOnlyTheKey(radix_cache.RadixCache):
    """The walk finds a child by its key (its first chunk), then takes the blocks of its edge
    without comparing their chunks with the prompt's: a prompt sharing only the first block
    gets the blocks of another prefix of the same length."""

    def _walk(self, chunks):
        node, matched = self.root, []
        while len(matched) < len(chunks) and chunks[len(matched)] in node.children:
            node = node.children[chunks[len(matched)]]
            take = min(len(node.blocks), len(chunks) - len(matched))
            matched += node.blocks[:take]
            if take < len(node.blocks):
                return node, take, matched
        return node, len(node.blocks), matched


def test_a_hit_sharing_the_blocks_of_another_prefix_is_caught():
    """The block-manager criterion once hit one prompt only, which the blocks held."""
    name = "block_manager_hits_and_evicts_least_recent_first"
    module = SimpleNamespace(RadixCache=_ComparesOnlyTheKey, RadixNode=radix_cache.RadixNode)
    failed = failures_of(12, [name], radix_cache=module)
    assert failed[name].startswith(
        "allocate(1, 5, [1, 2, 8, 9, 5]) hit blocks [0, 1], but block 1 holds tokens [3, 4], "
        "where the prompt has [8, 9]: a hit shares the blocks of another prefix"
    ), failed


class _ChunksOfTwo(radix_cache.RadixCache):
    """Cuts the tokens into chunks of 2, the B of every example, whatever its block_size."""

    def __init__(self, block_size):
        super().__init__(2)


def test_a_radix_tree_that_ignores_its_block_size_is_caught(monkeypatch):
    """Every check of exercise 12 once used B = 2, so a tree cutting chunks of 2 passed them
    all. The drawn program's B is now 3 to 5; the message names it, to reproduce the failure."""
    from minipaged.grader import ex12_prefix_cache as ex12

    name = "random_operations_match_the_contract"
    module = SimpleNamespace(RadixCache=_ChunksOfTwo, RadixNode=radix_cache.RadixNode)
    for block_size in ex12.DRAWN_BLOCK_SIZES:
        monkeypatch.setattr(ex12._DRAWS, "choice", lambda sizes, b=block_size: b)
        failed = failures_of(12, [c.name for c in ex12.CRITERIA], radix_cache=module)
        assert list(failed) == [name], failed
        assert f"on a new RadixCache(block_size={block_size}):" in failed[name]


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


def _kv_head_by_n_kv(query, key_pool, value_pool, block_tables, seq_lens, scale, block_size):
    """Exercise 07's loop with query head h reading KV head h // N_KV, not h // (N_Q / N_KV):
    the library's loop over pools whose heads are picked that way."""
    heads = [h // key_pool.shape[1] for h in range(query.shape[1])]
    return attention.paged_attention_decode_loop(
        query, key_pool[:, heads], value_pool[:, heads], block_tables, seq_lens, scale, block_size
    )


def test_a_loop_reading_kv_head_h_over_n_kv_fails_the_grouped_query_criterion():
    """With 4 query heads over 2 KV heads, h // N_KV and h // (N_Q / N_KV) are the same map:
    the grouped-query criterion passed it (the one-head-per-KV-head cases caught it, under
    other names). Its case is now 6 query heads over 3."""
    module = SimpleNamespace(**vars(attention))
    module.paged_attention_decode_loop = _kv_head_by_n_kv
    name = "loop_grouped_query_attention"
    failed = failures_of(7, [name], attention=module)
    assert "6 query heads over 3 KV heads" in failed[name]
    assert "expected [" in failed[name]


@pytest.mark.slow
def test_a_decode_kernel_reading_kv_head_h_over_n_kv_fails_the_gqa_criterion(tmp_path):
    """The same map in the kernel passed decode_batch_with_gqa, 4 query heads over 2."""
    right = "        kv_head = head // (query.shape[1] // key_pool.shape[1])  # GQA"
    kernel_with(
        tmp_path, "paged_attention.py", right, "        kv_head = head // key_pool.shape[1]  #"
    )
    failed = {r.name: r.message for r in grade(11, tmp_path).results if r.outcome == FAIL}
    assert "6 query heads over 3 KV heads" in failed["decode_batch_with_gqa"]
