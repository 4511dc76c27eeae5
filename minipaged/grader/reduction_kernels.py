"""The kernels exercise 10's checks launch on a student's ``tree_reduce``: one token per thread
block, one dimension per thread. Imported only in a process that has chosen Numba's simulator
or a GPU (the grader's checks import it inside the check)."""

from __future__ import annotations

import functools

from numba import cuda, float32

from cuda_kernels.block_reduce import add, maximum

NUM_THREADS = 32  # one warp: thread t holds dimension t of a head_dim = 32 query and key


@functools.cache
def kernels(tree_reduce, num_threads: int = NUM_THREADS):
    """``(dot, largest)`` built on ``tree_reduce`` with the library's ``add`` and ``maximum``,
    for thread blocks of ``num_threads`` threads (their scratch arrays' size)."""
    block_sum, block_max = tree_reduce(add), tree_reduce(maximum)

    @cuda.jit
    def dot(out, query, keys):
        """out[i, t] = q . k_i as thread t of block i sees it (every thread must see it)."""
        scratch = cuda.shared.array(num_threads, float32)
        t, i = cuda.threadIdx.x, cuda.blockIdx.x
        out[i, t] = block_sum(query[t] * keys[i, t], scratch)

    @cuda.jit
    def largest(out, values):
        """out[i, t] = max(m - x) for m = max(x): two reductions, one scratch, back to back."""
        scratch = cuda.shared.array(num_threads, float32)
        t, i = cuda.threadIdx.x, cuda.blockIdx.x
        first = block_max(values[i, t], scratch)
        out[i, t] = block_max(first - values[i, t], scratch)

    return dot, largest
