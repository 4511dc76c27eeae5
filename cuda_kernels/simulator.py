"""Numba's CUDA simulator, with the one repair the kernels here need: every thread of a thread
block gets the same shared array.

The simulator gives each line of source that calls ``cuda.shared.array`` one array per launch:
the first thread to reach the line makes it and stores it in a dict keyed by (file, line), and
every later thread finds it there. numba-cuda (0.30, and its main branch) looks the line up
and stores the new array in two separate steps, so two threads that reach the line together
(as the 32 threads released by one ``syncthreads`` do) can both find nothing and each make an
array of its own. A thread holding a private array then writes entries no other thread reads
and reads entries no other thread wrote: the kernel computes garbage, or indexes out of bounds
with it, and only when the OS happened to switch threads between the two steps. That is a race
in the simulator, not in a kernel: the barriers of ``paged_attention.py`` and
``block_reduce.py`` order every shared access (``tests/test_cuda_kernels.py`` watches them with
``minipaged.grader.shared_memory_races``).

``one_array_per_line`` looks up and stores in one step, and ``install`` puts it in the
simulator's place; ``cuda_kernels.launch`` calls it when the process simulates.

A GPU's shared memory starts a thread block holding whatever the last block left there, but
``np.empty`` often hands out zeroed pages, so a kernel that reads before it writes (an
accumulator never cleared) would pass in the simulator and fail on a GPU. With
``shared_memory_garbage`` set (the grader's simulating child sets it), every new shared array
starts as garbage: NaN in a float array, bytes ``GARBAGE_BYTE`` in an integer one (2139062143
in an int32: an index past any array).
"""

from __future__ import annotations

import sys

import numpy as np

GARBAGE_BYTE = 0x7F
shared_memory_garbage = False
"""Whether new shared arrays start as garbage rather than as ``np.empty`` leaves them (often
zeros)."""


def one_array_per_line(shared, shape, dtype, line: tuple[str, int]) -> np.ndarray:
    """The shared array of ``line`` ((file, line number) of the ``cuda.shared.array`` call)
    in ``shared``, the simulator's ``FakeCUDAShared`` of one launch: made by the first thread
    that asks, the same object for every thread after it."""
    from numba.cuda.simulator import kernelapi

    if isinstance(dtype, kernelapi.types.Type):
        dtype = kernelapi.numpy_support.as_dtype(dtype)
    # dict.setdefault looks up and stores in one step under the GIL (the key is a tuple of a
    # str and an int: no Python code runs inside it), so threads that arrive together all get
    # the array stored first; the spare ones they made are dropped.
    fresh = np.empty(shape, dtype)
    if shared_memory_garbage and fresh.dtype.kind == "f":
        fresh.fill(np.nan)  # NaN, not a large number: 0 * NaN is NaN, so no rescale hides it
    elif shared_memory_garbage:
        fresh.view(np.uint8).fill(GARBAGE_BYTE)
    return shared._allocations.setdefault(line, fresh)


def install() -> None:
    """Make the simulator's ``cuda.shared.array`` hand out arrays through
    ``one_array_per_line``, keyed as the simulator keys them (the calling line). Dynamic
    shared memory (``shape == 0``, one buffer for every call) and ``alignment`` (refused by
    the simulator) still go to the simulator's own method."""
    from numba.cuda.simulator import kernelapi

    simulators_array = kernelapi.FakeCUDAShared.array
    if getattr(simulators_array, "__module__", None) == __name__:
        return  # installed already

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:
            return simulators_array(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        return one_array_per_line(self, shape, dtype, (caller.f_code.co_filename, caller.f_lineno))

    kernelapi.FakeCUDAShared.array = array
