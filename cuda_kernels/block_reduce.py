"""Block reductions: every thread of a thread block brings one float32, every thread gets back
their maximum (or their sum). The online softmax needs one of each per round: the round's
largest score, to move the running max $m$, and the sum of its $e^{s - m}$, to grow $l$.

Two implementations, one contract ``reduce(value, scratch) -> float32`` where ``scratch`` is a
shared-memory array of $T$ float32 (``NUM_THREADS``):

- ``"tree"``: every thread writes its value to shared memory, then half the threads combine
  pairs, then a quarter, ... ($\\log_2 T$ steps, a ``syncthreads`` after each). Runs anywhere,
  including Numba's CUDA simulator.
- ``"shuffle"``: the 32 lanes of a warp combine their values through registers with
  ``shfl_xor_sync`` (5 steps, no shared memory, no barrier), then lane 0 of each warp leaves
  its warp's result in shared memory and every thread combines the $T/32$ of them. This is
  what CUDA kernels such as vLLM's do, but the simulator has no warp shuffles.

``REDUCTION`` is picked at import, when the process knows whether it is simulating: the
kernels then compile with the reduction their target can run. Both compile to PTX (see
``tests/test_ptx.py``); the tree also runs in the simulator tests.
"""

from __future__ import annotations

import functools

from numba import cuda

from cuda_kernels.launch import SIMULATOR, WARP_SIZE

REDUCTIONS = ("tree", "shuffle")
REDUCTION = "tree" if SIMULATOR else "shuffle"
"""The reduction the kernels of this process use."""

FULL_MASK = 0xFFFFFFFF
"""All 32 lanes of a warp take part in each shuffle."""


@cuda.jit(device=True)
def maximum(a, b):
    return max(a, b)


@cuda.jit(device=True)
def add(a, b):
    return a + b


def tree_reduce(combine):
    """A block reduction over shared memory; needs $T$ a power of two."""

    @cuda.jit(device=True)
    def reduce(value, scratch):
        thread = cuda.threadIdx.x
        scratch[thread] = value
        cuda.syncthreads()
        stride = scratch.shape[0] // 2
        while stride > 0:
            if thread < stride:
                scratch[thread] = combine(scratch[thread], scratch[thread + stride])
            cuda.syncthreads()
            stride //= 2
        result = scratch[0]
        cuda.syncthreads()  # every thread has read scratch[0] before the next reduction writes
        return result

    return reduce


def shuffle_reduce(combine):
    """A block reduction through warp shuffles; needs $T$ a multiple of 32."""

    @cuda.jit(device=True)
    def reduce(value, scratch):
        thread = cuda.threadIdx.x
        offset = WARP_SIZE // 2
        while offset > 0:  # lane i meets lane i ^ 16, then i ^ 8, ...: all lanes end equal
            value = combine(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
            offset //= 2
        if thread % WARP_SIZE == 0:
            scratch[thread // WARP_SIZE] = value
        cuda.syncthreads()
        result = scratch[0]
        for warp in range(1, cuda.blockDim.x // WARP_SIZE):
            result = combine(result, scratch[warp])
        cuda.syncthreads()  # every thread has read scratch before the next reduction writes
        return result

    return reduce


@functools.cache
def block_reductions(reduction: str):
    """``(block_max, block_sum)`` device functions for ``reduction`` (one of ``REDUCTIONS``)."""
    if reduction == "tree":
        return tree_reduce(maximum), tree_reduce(add)
    if reduction == "shuffle":
        return shuffle_reduce(maximum), shuffle_reduce(add)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
