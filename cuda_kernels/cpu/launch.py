"""How a torch tensor reaches a CPU twin, and the settings every twin compiles with: the CPU
counterpart of ``cuda_kernels/launch.py``.

- what a kernel receives: a numpy view of a CPU tensor (``tensor.numpy()`` shares its memory, so
  a kernel's writes land in the tensor);
- ``NUM_THREADS``: $T$, the tokens of one round, as a CUDA thread block of $T$ threads takes
  them; here the "threads" are iterations of one loop;
- how many cores the parallel loops use: torch's thread count, so that a comparison with
  torch's own operations is fair.
"""

from __future__ import annotations

import functools
import threading
import types

import numba
import numpy as np
import torch

from cuda_kernels.cpu.compile_cache import load_callees
from cuda_kernels.fp8 import as_bytes

NUM_THREADS = 32
"""$T$: tokens per round of the online softmax, one warp's worth."""

FASTMATH = {"reassoc", "contract"}
"""Let LLVM reorder sums (so a dot product over ``head_dim`` runs in SIMD lanes) and fuse
multiply-adds; NaN and infinity keep their meaning (no ``nnan``/``ninf``), since the online
softmax starts from $m = -\\infty$."""


def kernel_array(tensor: torch.Tensor, name: str) -> np.ndarray:
    """The array a twin reads or writes in place of ``tensor``: a numpy view of it (so a write
    lands in the tensor), contiguous so that one compiled version serves every call. An FP8
    tensor arrives as its bytes (``cuda_kernels.fp8``).

    The common case is tried first: a float32 or integer CPU tensor that needs no grad, which
    ``numpy()`` views as it is. Only a tensor it refuses is asked why, in turn: from cold
    caches, as a layer's attention starts, every attribute read costs microseconds, and a
    twin's call views three to four tensors."""
    try:
        array = tensor.numpy()
    except (TypeError, RuntimeError):  # on another device, needing grad, or FP8 (no NumPy dtype)
        check_device(tensor, name)
        if tensor.requires_grad:  # numpy() refuses such a tensor; detach() makes a new one
            tensor = tensor.detach()
        array = as_bytes(tensor).numpy()
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be contiguous for the CPU kernels: call .contiguous()")
    return array


def check_device(tensor: torch.Tensor, name: str) -> None:
    if not tensor.is_cpu:  # asks without making a torch.device, as .device does
        raise ValueError(
            f"{name} is on {tensor.device}, but the CPU kernels (backend 'numba-cpu') run on "
            "the CPU: move it with .cpu(), or use backend 'numba' on a GPU"
        )


def on_torch_threads(kernel: numba.core.registry.CPUDispatcher):
    """``kernel`` (an ``@njit(parallel=True)`` twin) set to run on as many threads as torch uses
    (at most Numba's pool), so a comparison with torch's own operations is fair. On one thread,
    the same loop nest compiled without ``parallel`` (``prange`` runs as ``range``): the result
    is the same, and no parallel region is opened and joined per call, which costs
    microseconds on an idle machine and can cost milliseconds on a busy one.

    Numba's thread count belongs to the calling thread and stays until it is set again, and
    setting it costs about 0.08 ms from cold caches (it takes a process-wide lock), so it is
    set only when torch's count changed since this thread last set it (``numba_threads``). A
    program that sets Numba's count itself in between makes the twins run on its count until
    torch's changes: the same results, only not on torch's threads."""
    threads = min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)
    changed = threads > 1 and getattr(numba_threads, "count", None) != threads
    if changed and not numba.config.DISABLE_JIT:
        numba.set_num_threads(threads)
        numba_threads.count = threads
    return runnable(kernel, threads <= 1)


numba_threads = threading.local()
"""``count``: the thread count ``on_torch_threads`` last gave Numba from this thread."""


def runnable(kernel: numba.core.registry.CPUDispatcher, one_thread: bool):
    """What runs ``kernel``, found once a process for each thread count's kind and kept in
    ``runners``: ``kernel`` itself, its ``serial`` copy on one thread, or, with Numba's
    compiler off, its Python, to step through. Before a compiled twin first runs, its callees'
    cached code is loaded ahead of it, so that a twin loaded from Numba's cache runs the code a
    fresh compilation runs (``compile_cache.load_callees``).

    Every call of a twin asks, so the lookup is by the kernel's ``id``, an int, and not by the
    kernel: from cold caches, hashing a Numba dispatcher cost a call about 7 µs, where a whole
    twin call over 16 tokens took about 0.3 ms (on the machine this was written on)."""
    key = (id(kernel), one_thread)
    found = runners.get(key)
    if found is not None and found[0] is kernel:
        return found[1]
    if numba.config.DISABLE_JIT:
        return kernel
    load_callees(kernel)
    runner = serial(kernel) if one_thread else kernel
    runners[key] = (kernel, runner)  # the kernel kept with it, so its id is never reused
    return runner


runners: dict[tuple[int, bool], tuple] = {}
"""``(id(kernel), one_thread)`` -> ``(kernel, what runs it)``: ``runnable``'s findings."""


@functools.cache
def serial(kernel: numba.core.registry.CPUDispatcher):
    """``kernel`` compiled with its options but ``parallel``. It is compiled from a copy of the
    Python function named ``<name>_serial``: Numba's on-disk cache names its files after the
    function, and its index would not tell a parallel and a serial compilation of one function
    apart, so under its own name the serial twin is cached too and a new process loads it
    instead of compiling it again (seconds)."""
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
    py_func = kernel.py_func
    code = py_func.__code__
    twin = types.FunctionType(
        code, py_func.__globals__, f"{code.co_name}_serial", py_func.__defaults__
    )
    twin.__qualname__ = f"{py_func.__qualname__}_serial"
    return numba.njit(**options, cache=True)(twin)
