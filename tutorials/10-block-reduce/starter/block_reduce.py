"""Exercise 10: one warp's dot product, a reduction through shared memory.

Fill in ``reduce`` below, then run

    minipaged exercises check 10

which launches kernels of its own on your reduction, in Numba's CUDA simulator: 32 threads,
thread t multiplies q[t] * k[t], and your reduction adds the 32 products, giving every thread
the score q . k of one token. The decode kernel (exercise 11) does this for every token. The
names are those of ``cuda_kernels.block_reduce``.
"""

from __future__ import annotations

from numba import cuda


@cuda.jit(device=True)
def maximum(a, b):
    return max(a, b)


@cuda.jit(device=True)
def add(a, b):
    return a + b


def tree_reduce(combine):
    """A reduction over the T threads of a block (T = cuda.blockDim.x, a power of two) through
    the shared array ``scratch`` of T float32: ``combine`` is ``add`` for a sum, ``maximum``
    for a max."""

    @cuda.jit(device=True)
    def reduce(value, scratch):
        """Every thread passes its ``value``; every thread gets back the combination of all T.
        Thread t writes scratch[t]; then, for stride = T/2, T/4, ..., 1, each thread t < stride
        combines scratch[t] with scratch[t + stride]. Wait for every thread
        (``cuda.syncthreads()``) whenever one thread is about to read what another wrote, and
        before the next reduction may overwrite what this one still reads."""
        # --- your code here (about 12 lines) ---
        raise NotImplementedError("exercise 10: sum the T values in a tree")

    return reduce
