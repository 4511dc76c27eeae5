"""Checks for exercise 10: one warp's dot product, a reduction through shared memory, run in
Numba's CUDA simulator.

The student's ``block_reduce.py`` mirrors ``cuda_kernels.block_reduce``: ``tree_reduce(combine)``
returns a device function ``reduce(value, scratch)`` that takes one float32 from each of the
$T$ threads of a block and gives every thread the combination of all $T$. The checks launch a
kernel of their own in which thread $t$ multiplies $q_t k_t$ and the reduction sums the products:
the score $q \\cdot k$ of one token, the inner step of the decode kernel (exercise 11). The
kernels are built inside the checks, so this module imports no numba: the grader runs them in a
simulator process.
"""

from __future__ import annotations

import numpy as np

from minipaged.grader.drawn_sizes import at_fixed_then_drawn
from minipaged.grader.report import CheckFailed, Criterion, note_call

NUM_THREADS = 32  # one warp: thread t holds dimension t of a head_dim = 32 query and key

WIDER_BLOCKS = (64, 128)
"""The threads a block, $T$, of the dot product each grading draws after the fixed 32: a tree
written for one warp (``stride = 16``) passed every case at 32."""


def _dot(threads: int) -> str:
    return f"reduce = tree_reduce(add); reduce(q[t] * k[t], scratch) in each of {threads} threads"


DOT = _dot(NUM_THREADS)
LARGEST = (
    "reduce = tree_reduce(maximum); m = reduce(x[t], scratch), then reduce(m - x[t], scratch) "
    "in each of 32 threads"
)
BOTH_KERNELS = "the kernels built on tree_reduce(add) and tree_reduce(maximum)"
"""The calls of the student's ``tree_reduce`` that the checks make, as their messages name them."""


def _kernels(tree_reduce, threads: int = NUM_THREADS):
    from minipaged.grader.reduction_kernels import kernels

    return kernels(tree_reduce, threads)


def _launch(kernel, out, *args) -> np.ndarray:
    """``kernel`` on ``out.shape[0]`` thread blocks of ``out.shape[1]`` threads."""
    kernel[out.shape[0], out.shape[1]](out, *args)
    return out


def _inputs(seed: int, tokens: int, threads: int = NUM_THREADS):
    rng = np.random.default_rng(seed)
    query = rng.standard_normal(threads).astype(np.float32)
    keys = rng.standard_normal((tokens, threads)).astype(np.float32)
    return query, keys


def _compare(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    for i, row in enumerate(got):
        close = np.abs(row - expected[i]) <= 1e-4 * (1 + abs(expected[i]))
        wrong = np.flatnonzero(~close)  # NaN is close to nothing: "> tolerance" let it pass
        if wrong.size == row.size and bool(np.all(row == row[0])):
            raise CheckFailed(
                f"{what}, token {i}: every thread got {row[0]:.5f}, expected "
                f"{expected[i]:.5f}. The threads agree, so the result reaches them all; what "
                "the tree combined is wrong: each round, thread t < stride combines scratch[t] "
                "with scratch[t + stride] by combine (not +), for stride = T/2, T/4, ..., 1 "
                "with T = scratch.shape[0] (not a number written for 32 threads)"
            )
        if wrong.size:
            t = int(wrong[0])
            others = "" if wrong.size == 1 else f" (and {wrong.size - 1} other threads)"
            raise CheckFailed(
                f"{what}, token {i}: thread {t} got {row[t]:.5f}, expected {expected[i]:.5f}"
                f"{others}. Every thread must return the block's result: read it from "
                "scratch[0] after the last cuda.syncthreads()"
            )


def _launch_dot(student, seed: int, tokens: int, threads: int = NUM_THREADS) -> np.ndarray:
    """Next to the student's code: the dot-product kernel on their reduction, in blocks of
    ``threads`` threads."""
    dot, _ = _kernels(student.block_reduce.tree_reduce, threads)
    query, keys = _inputs(seed, tokens, threads)
    return _launch(dot, np.zeros((tokens, threads), np.float32), query, keys)


def _launch_largest(student, seed: int, tokens: int) -> np.ndarray:
    """Next to the student's code: two maximum reductions back to back on their reduction."""
    _, largest = _kernels(student.block_reduce.tree_reduce)
    _, values = _inputs(seed, tokens)
    return _launch(largest, np.zeros((tokens, NUM_THREADS), np.float32), values)


def _watched_launches(student) -> dict:
    """Next to the student's code: both kernels, one token each, with every shared-memory
    access recorded; the races and divergent barriers found, or the error that stopped them."""
    from minipaged.grader.shared_memory_races import crash_report, watch_shared_memory

    dot, largest = _kernels(student.block_reduce.tree_reduce)
    query, keys = _inputs(2, 1)
    outputs = []
    with watch_shared_memory() as log:
        for kernel, args in ((dot, (query, keys)), (largest, (keys,))):
            try:
                outputs.append(_launch(kernel, np.zeros((1, NUM_THREADS), np.float32), *args))
            except NotImplementedError:
                raise
            except Exception as error:
                return crash_report(error, student.where(error))
    return {**log.report(), "outputs": outputs}


def _run(student, what: str, launch, *args) -> np.ndarray:
    """``student.run(launch, *args)``; an error of the student's code is noted with ``what``,
    the call of their reduction it came from, for the failure's message."""
    try:
        return student.run(launch, *args)
    except Exception as error:
        note_call(error, what)
        raise


def judge_races(seen: dict, launched: str) -> None:
    """Fail with the first divergent barrier or race a watched launch found; ``launched``
    names the call that was watched."""
    if seen["crash"]:
        raise CheckFailed(
            f"{launched}: the kernel failed before any race could be watched for: {seen['crash']}"
        )
    if seen["divergent"]:
        raise CheckFailed(f"{launched}: {seen['divergent'][0]}")
    if seen["races"]:
        raise CheckFailed(
            f"{launched}: {len(seen['races'])} shared-memory race(s); the first: "
            f"{seen['races'][0]}. The simulator may still give the right answer; a GPU, whose "
            "threads really run at once, will not, every time"
        )


def check_dot_product(student):
    """T threads, one dimension each, sum q_t k_t: every thread gets q . k (T = 32, then 64 or
    128, drawn)"""

    def case(threads: int) -> None:
        query, keys = _inputs(0, 3, threads)
        got = _run(student, _dot(threads), _launch_dot, 0, 3, threads)
        _compare(got, keys @ query, f"{_dot(threads)}, q . k, head_dim {threads}")

    at_fixed_then_drawn(case, "T", NUM_THREADS, WIDER_BLOCKS)


def check_max_and_reuse(student):
    """the same tree finds a maximum, and a second reduction may follow the first at once

    Rule: reduce(value, scratch) gives every thread the combination of all T values, and
    returns only once every thread has read its result, so scratch may be written again."""
    _, values = _inputs(1, 2)
    expected = values.max(axis=1) - values.min(axis=1)
    what = f"{LARGEST}, max(m - x) after m = max(x)"
    _compare(_run(student, LARGEST, _launch_largest, 1, 2), expected, what)


def check_no_shared_memory_race(student):
    """threads wait at cuda.syncthreads() between writing scratch and reading another's entry"""
    seen = student.run(_watched_launches)
    judge_races(seen, f"{BOTH_KERNELS}, one token each, watched")
    query, keys = _inputs(2, 1)  # a reduction that shares nothing has no race, nor a result
    _compare(seen["outputs"][0], keys @ query, f"{DOT}, q . k, head_dim 32, watched")
    largest = keys.max(axis=1) - keys.min(axis=1)
    _compare(seen["outputs"][1], largest, f"{LARGEST}, max(m - x) after m = max(x), watched")


CRITERIA = tuple(
    Criterion(check, runs_in="simulator")
    for check in (check_dot_product, check_max_and_reuse, check_no_shared_memory_race)
)
