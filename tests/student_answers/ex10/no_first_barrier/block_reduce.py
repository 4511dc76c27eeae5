"""No barrier between writing scratch[t] and the first round reading it.

Fails: dot_product
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
        t = cuda.threadIdx.x
        n = scratch.shape[0]
        scratch[t] = value
        half = n // 2
        while half > 0:
            if t < half:
                scratch[t] = combine(scratch[t], scratch[t + half])
            cuda.syncthreads()
            half = half // 2
        total = scratch[0]
        cuda.syncthreads()
        return total

    return reduce
