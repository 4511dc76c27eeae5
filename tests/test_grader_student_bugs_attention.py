"""Realistic student bugs in attention (exercise 07's loop) and its kernels (exercises 10 and
11, run on the CUDA simulator), each once passing every criterion of its exercise and now
failing the criterion written for it with its cause named (the rest of the realistic bugs:
test_grader_student_bugs.py and test_grader_student_bugs_prefix_cache.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_exercises import as_written_by_a_student, failures_of

from minipaged import attention
from minipaged.grader import ex08_copy_blocks, ex09_reshape_and_cache
from minipaged.grader.grading import failure_message, grade
from minipaged.grader.report import FAIL, CheckFailed
from minipaged.grader.shared_memory_races import RaceLog
from minipaged.grader.student import Student

# The library's code handed in as a student's: the copy check that would refuse it is off.
pytestmark = pytest.mark.usefixtures("library_code_allowed")


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


def loop_failures(loop, name: str) -> dict[str, str]:
    """Exercise 07's criterion ``name``, run on the library's attention module with ``loop``
    for its ``paged_attention_decode_loop``: ``{name: message}`` if it failed, else ``{}``."""
    module = SimpleNamespace(**vars(attention))
    module.paged_attention_decode_loop = loop
    return failures_of(7, [name], attention=module)


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
    name = "loop_grouped_query_attention"
    failed = loop_failures(_kv_head_by_n_kv, name)
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


# Each passed every exercise 11 criterion while no case had L = 1, a block id above 255 or a
# group of query heads a KV head other than 1 or 2: (criterion, words of its message, line, bug)
DECODE_SIZE_BUGS = {
    "rounds-stop-at-L-minus-1": (
        "decode_one_head",
        "(L=1, B=4)",
        "        for first in range(start, end, num_threads):",
        "        for first in range(start, end - 1, num_threads):",
    ),
    "block-ids-in-bytes": (
        "decode_one_head",
        "block ids past 255",
        "        blocks = cuda.shared.array(num_threads, int32)  # [T] physical block T_r[j]",
        "        blocks = cuda.shared.array(num_threads, np.uint8)  # [T] physical block T_r[j]",
    ),
    "group-by-a-shift": (
        "decode_batch_with_gqa",
        "10 query heads over 2 KV heads, a group of 5",
        "        kv_head = head // (query.shape[1] // key_pool.shape[1])  # GQA",
        "        group = query.shape[1] // key_pool.shape[1]\n"
        "        kv_head = head >> (group.bit_length() - 1)  # GQA, h >> log2(group)",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", DECODE_SIZE_BUGS)
def test_a_decode_kernel_right_only_at_the_old_sizes_is_caught(tmp_path, bug):
    criterion, words, line, wrong = DECODE_SIZE_BUGS[bug]
    kernel_with(tmp_path, "paged_attention.py", line, wrong)
    failed = {r.name: r.message for r in grade(11, tmp_path).results if r.outcome == FAIL}
    assert set(failed) == {criterion}
    assert words in failed[criterion]


def _copy_blocks(swapped=False, values=True):
    """copy_blocks in plain PyTorch as a student's kernel would do it, with ``src`` and ``dst``
    swapped or the value pools left alone."""

    def copy_blocks(key_pools, value_pools, pairs):
        pools = [*key_pools, *value_pools] if values else key_pools
        for pool in pools:
            source = pool.clone()
            for src, dst in pairs:
                pool[src if swapped else dst] = source[dst if swapped else src]

    return SimpleNamespace(cache_ops=SimpleNamespace(copy_blocks=copy_blocks))


@pytest.mark.parametrize(
    ("student", "words"),
    [
        (_copy_blocks(swapped=True), "key_pool holds each pair's dst copied onto its src: the two"),
        (_copy_blocks(values=False), "key_pool is right but value_pool did not change"),
    ],
    ids=["swapped", "keys-only"],
)
def test_a_block_copy_swapped_or_of_keys_alone_is_named(student, words):
    """Both failed with one wrong element ('key_pool[1, 0, 0, 0] is 96, expected 32: block 1
    is no destination'), which a student has to reason back from to the cause."""
    with pytest.raises(CheckFailed, match=re.escape(words)):
        ex08_copy_blocks.check_several_pairs(student)


def test_a_padded_slot_written_from_the_pools_end_is_named():
    """Slot -1 written as Python's index from the end failed with 'key_pool[5, :, 3] (slot 23)
    should hold -7.0 (no token's slot)'; the message now says which slot and why."""

    def reshape_and_cache(key, value, key_pool, value_pool, slot_mapping):
        block_size = key_pool.shape[2]
        for i, slot in enumerate(slot_mapping.tolist()):  # no check for slot < 0
            for pool, new in ((key_pool, key), (value_pool, value)):
                pool[slot // block_size, :, slot % block_size] = new[i]

    student = SimpleNamespace(cache_ops=SimpleNamespace(reshape_and_cache=reshape_and_cache))
    with pytest.raises(CheckFailed, match=r"key_pool slot 23 was written: slot -1, counted from"):
        ex09_reshape_and_cache.check_cache_write(student)
