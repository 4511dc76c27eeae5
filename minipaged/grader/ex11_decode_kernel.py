"""Checks for exercise 11: the paged-attention decode kernel in Numba CUDA (source text §4), run
in Numba's CUDA simulator on the CPU, and on a real GPU where there is one.

The student's ``paged_attention.py`` mirrors ``cuda_kernels.paged_attention``
(``paged_attention_decode``). The simulator runs one OS thread per CUDA thread, about 0.1 s per
thread block per launch, so the simulator checks launch few, small blocks; they check at least
what exercise 07 checks of the loop (very large and very negative scores), with block sizes
that do not divide the thread count, and the grading child fills every shared array with
garbage before the kernel runs (``cuda_kernels.simulator.shared_memory_garbage``), as a GPU
leaves it. The simulator cannot
show a missing ``cuda.syncthreads()`` by a wrong answer, so one check watches every shared-memory
access for races instead (``minipaged.grader.shared_memory_races``). This module imports no
numba itself: the grader decides in which process (simulator or GPU) each check runs.
"""

from __future__ import annotations

import functools

import torch

from minipaged.grader.ex07_attention import TOLERANCE, call_of, compare, make_case
from minipaged.grader.ex10_block_reduce import judge_races
from minipaged.grader.report import CheckFailed, Criterion


def _decode(student, case) -> None:
    compare("paged_attention_decode", student.paged_attention.paged_attention_decode, case)


ONE_HEAD = (
    make_case("one sequence, one head (L=5, B=4)", [5], num_heads=1, num_kv_heads=1),
    # No other case has L = 1: a round loop that stops at L - 1 (range(0, L - 1, T)) skipped it
    make_case("one sequence of one token (L=1, B=4)", [1], num_heads=1, num_kv_heads=1, seed=1),
    # Every other pool has fewer than 256 blocks: a block id kept in a uint8 passed them
    make_case(
        "one head over 11 blocks scattered in a pool of 300, block ids past 255 (L=43, B=4)",
        [43],
        num_heads=1,
        num_kv_heads=1,
        seed=10,
        pool_blocks=300,
    ),
)


def check_decode_one_head(student):
    """the decode kernel attends one sequence, one head: ending mid-block (L=5, B=4), of one
    token (L=1), and over 11 blocks whose ids pass 255

    Rule: the output for head h is the sum over τ < L of softmax(s)_τ v_τ, with
    s_τ = scale * q_h · k_τ; token τ is read at block T[floor(τ/B)], offset τ mod B."""
    for case in ONE_HEAD:
        _decode(student, case)


GQA = (
    make_case(
        "a batch of L=37, 6 with 6 query heads over 3 KV heads (B=8)",
        [37, 6],
        block_size=8,
        num_heads=6,
        num_kv_heads=3,  # 4 over 2 let h // N_KV pass: there N_KV = N_Q / N_KV
        head_dim=16,
        seed=5,
    ),
    # Groups of 1 and 2 let a shift by log2 of the group pass (h >> 1 is h // 2): here it is 5
    make_case("10 query heads over 2 KV heads, a group of 5 (L=9, B=4)", [9], num_heads=10, seed=6),
)


def check_decode_batch_with_gqa(student):
    """the decode kernel handles a batch, GQA (groups of 2 and 5), L longer than one round of
    threads, NaN slots

    Rule: thread block (b, h) attends sequence b's L_b tokens only, query head h to KV head
    floor(h / (N_Q / N_KV)), its T threads taking tokens first, first + T, ... until L_b."""
    for case in GQA:
        _decode(student, case)


SIMULATED_THREADS = 32
"""T, the threads of a thread block, in the simulator (``cuda_kernels.launch.NUM_THREADS``)."""


SPLIT_BLOCKS = make_case(
    f"B=12, which does not divide T={SIMULATED_THREADS}: L=50, 13 over 2 heads",
    [50, 13],
    block_size=12,
    seed=9,
)
LARGE_SCORES = make_case(
    "large scores (|q·k| in the thousands) over two rounds of threads (L=45, 9; B=12)",
    [45, 9],
    block_size=12,
    score_scale=12.0,
    seed=3,
)
FAR_BELOW = make_case(
    "scores all far below zero (s ≈ -120, where exp(s) is 0 in float32; L=40, 3; B=8)",
    [40, 3],
    block_size=8,
    far_below=120.0,
    seed=7,
)


def check_decode_block_size_that_does_not_divide_the_threads(student):
    """the decode kernel finds token tau in block T[floor(tau/B)] when B does not divide T: a
    round of T tokens starts and ends mid-block"""
    _decode(student, SPLIT_BLOCKS)


def check_decode_large_scores_stay_finite(student):
    """the kernel's online softmax subtracts the running max, so large scores stay finite
    (as exercise 07's loop)"""
    _decode(student, LARGE_SCORES)


def check_decode_scores_far_below_zero(student):
    """the kernel's running max starts at m = -inf, so scores all far below zero stay finite
    (as exercise 07's loop)"""
    _decode(student, FAR_BELOW)


def check_decode_head_dim_wider_than_the_threads(student):
    """the decode kernel covers a head_dim wider than its T threads: thread t owns t, t + T, ..."""
    head_dim = SIMULATED_THREADS + 16
    case = make_case(
        f"one head of head_dim {head_dim}, more than the T = {SIMULATED_THREADS} threads (L=5)",
        [5],
        num_heads=1,
        num_kv_heads=1,
        head_dim=head_dim,
        seed=3,
    )
    decode = student.paged_attention.paged_attention_decode
    got = decode(*(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args))
    if isinstance(got, torch.Tensor) and got.shape == case.expected.shape:
        close = (got - case.expected).abs() <= TOLERANCE  # NaN is never close
        wrong = (~close[0, 0]).nonzero().flatten().tolist()
        if wrong and min(wrong) >= SIMULATED_THREADS:
            raise CheckFailed(
                f"{call_of('paged_attention_decode', case)} on {case.what}: dimensions "
                f"{wrong[0]}..{wrong[-1]} "
                f"are wrong, the first {SIMULATED_THREADS} right. Thread t owns dimensions "
                "d = t, t + T, t + 2T, ... (T = cuda.blockDim.x): loop over them wherever the "
                "kernel loads the query, zeroes or updates the accumulator, and writes out"
            )
    compare("paged_attention_decode", decode, case)


RACE_CASE = make_case(
    "a sequence longer than one round of threads (L=37, B=8)", [37], block_size=8, seed=8
)


def _watched_decode(student, args: tuple) -> dict:
    """Next to the student's code: their kernel on ``args`` (``RACE_CASE``'s, as the grader
    drew them) with every shared-memory access recorded; the races and divergent barriers
    found, or the error that stopped it, and the output."""
    from minipaged.grader.shared_memory_races import crash_report, watch_shared_memory

    with watch_shared_memory() as log:
        try:
            out = student.paged_attention.paged_attention_decode(*args)
        except NotImplementedError:
            raise
        except Exception as error:
            return crash_report(error, student.where(error))
    return {**log.report(), "out": out}


def check_decode_has_no_shared_memory_race(student):
    """threads wait at cuda.syncthreads() before touching what another thread wrote to shared
    memory, and before overwriting what another thread still reads"""
    seen = student.run(_watched_decode, RACE_CASE.args)  # values drawn here, not there
    judge_races(
        seen, f"{call_of('paged_attention_decode', RACE_CASE)} on {RACE_CASE.what}, watched"
    )
    # A kernel that shares nothing has no race, nor an output: the watched launch must be right
    compare("paged_attention_decode", lambda *args: seen["out"], RACE_CASE)


@functools.cache
def _gpu_case():
    """Llama-scale decode inputs (about 30 MB: made only where a GPU criterion runs)."""
    return make_case(
        "a GPU batch: 8 sequences up to L=1000, 32 query heads over 8 KV heads",
        [1000, 17, 512, 300, 999, 64, 128, 700],
        block_size=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        seed=6,
    )


def _on_the_gpu(student, repeats: int = 20) -> tuple:
    """Next to the student's code, on the GPU: their kernel's output on ``_gpu_case()`` (back
    on the CPU) and its milliseconds per launch."""
    args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in _gpu_case().args)
    decode = student.paged_attention.paged_attention_decode
    return decode(*args).cpu(), _milliseconds(decode, args, repeats)


def check_decode_on_a_gpu(student):
    """on a real GPU: correct at Llama scale and at most 10x the time of minipaged's v1 kernel"""
    import cuda_kernels

    got, yours = student.run(_on_the_gpu)
    compare("paged_attention_decode", lambda *args: got, _gpu_case())
    args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in _gpu_case().args)
    library = _milliseconds(cuda_kernels.paged_attention_decode, args)
    if yours > 10 * library:
        raise CheckFailed(
            f"your kernel takes {yours:.3f} ms per launch, minipaged's v1 kernel {library:.3f} "
            "ms: more than 10x. Do the threads of a block share out the tokens, and is the "
            "query loaded once into shared memory?"
        )


def _milliseconds(function, args, repeats: int = 20) -> float:
    function(*args)  # compile and warm up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        function(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


CRITERIA = (
    Criterion(check_decode_one_head, runs_in="simulator"),
    Criterion(check_decode_batch_with_gqa, runs_in="simulator"),
    Criterion(check_decode_head_dim_wider_than_the_threads, runs_in="simulator"),
    Criterion(check_decode_block_size_that_does_not_divide_the_threads, runs_in="simulator"),
    Criterion(check_decode_large_scores_stay_finite, runs_in="simulator"),
    Criterion(check_decode_scores_far_below_zero, runs_in="simulator"),
    Criterion(check_decode_has_no_shared_memory_race, runs_in="simulator"),
    Criterion(check_decode_on_a_gpu, runs_in="gpu"),
)
