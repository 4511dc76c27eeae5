"""Checks for exercise 11: the paged-attention decode kernel in Numba CUDA (source text §4), run
in Numba's CUDA simulator on the CPU, and on a real GPU where there is one.

The student's ``paged_attention.py`` mirrors ``cuda_kernels.paged_attention``
(``paged_attention_decode``). The simulator runs one OS thread per CUDA thread, about 0.1 s per
thread block per launch, so the simulator checks launch few, small blocks. The simulator cannot
show a missing ``cuda.syncthreads()`` by a wrong answer, so one check watches every shared-memory
access for races instead (``minipaged.grader.shared_memory_races``). This module imports no
numba itself: the grader decides in which process (simulator or GPU) each check runs.
"""

from __future__ import annotations

import dataclasses

import torch

from minipaged.grader.ex07_attention import TOLERANCE, compare, make_case
from minipaged.grader.report import CheckFailed, Criterion


def check_decode_one_head(student):
    """the decode kernel attends one sequence, one head, ending mid-block (L=5, B=4)"""
    case = make_case("one sequence, one head (L=5, B=4)", [5], num_heads=1, num_kv_heads=1)
    compare("paged_attention_decode", student.paged_attention.paged_attention_decode, case)


def check_decode_batch_with_gqa(student):
    """the decode kernel handles a batch, GQA, L longer than one round of threads, NaN slots"""
    case = make_case(
        "a batch of L=37, 6 with 4 query heads over 2 KV heads (B=8)",
        [37, 6],
        block_size=8,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        seed=5,
    )
    compare("paged_attention_decode", student.paged_attention.paged_attention_decode, case)


SIMULATED_THREADS = 32
"""T, the threads of a thread block, in the simulator (``cuda_kernels.launch.NUM_THREADS``)."""


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
                f"paged_attention_decode on {case.what}: dimensions {wrong[0]}..{wrong[-1]} "
                f"are wrong, the first {SIMULATED_THREADS} right. Thread t owns dimensions "
                "d = t, t + T, t + 2T, ... (T = cuda.blockDim.x): loop over them wherever the "
                "kernel loads the query, zeroes or updates the accumulator, and writes out"
            )
    compare("paged_attention_decode", decode, case)


def check_decode_has_no_shared_memory_race(student):
    """threads wait at cuda.syncthreads() before touching what another thread wrote to shared
    memory, and before overwriting what another thread still reads"""
    from minipaged.grader.shared_memory_races import watch_shared_memory

    case = make_case(
        "a sequence longer than one round of threads (L=37, B=8)", [37], block_size=8, seed=8
    )
    with watch_shared_memory() as log:
        try:
            student.paged_attention.paged_attention_decode(*case.args)
        except NotImplementedError:
            raise
        except Exception as error:
            raise CheckFailed(
                f"the kernel failed before any race could be watched for: "
                f"{type(error).__name__}: {error}{student.where(error)}"
            ) from None
    if log.divergent_barriers():
        raise CheckFailed(log.divergent_barriers()[0])
    if log.races:
        raise CheckFailed(
            f"{len(log.races)} shared-memory race(s) on {case.what}; the first: {log.races[0]}. "
            "The simulator may still give the right answer; a GPU, whose threads really run "
            "at once, will not, every time"
        )


def check_decode_on_a_gpu(student):
    """on a real GPU: correct at Llama scale and at most 10x the time of minipaged's v1 kernel"""
    import cuda_kernels

    case = make_case(
        "a GPU batch: 8 sequences up to L=1000, 32 query heads over 8 KV heads",
        [1000, 17, 512, 300, 999, 64, 128, 700],
        block_size=16,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        seed=6,
    )
    args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in case.args)
    gpu_case = dataclasses.replace(case, args=args, expected=case.expected.cuda())
    compare("paged_attention_decode", student.paged_attention.paged_attention_decode, gpu_case)
    yours = _milliseconds(student.paged_attention.paged_attention_decode, args)
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
    Criterion(check_decode_has_no_shared_memory_race, runs_in="simulator"),
    Criterion(check_decode_on_a_gpu, runs_in="gpu"),
)
