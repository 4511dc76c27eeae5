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

import numba
import numpy as np
import torch

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
    tensor arrives as its bytes (``cuda_kernels.fp8``)."""
    check_device(tensor, name)
    array = as_bytes(tensor.detach()).numpy()
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be contiguous for the CPU kernels: call .contiguous()")
    return array


def check_device(tensor: torch.Tensor, name: str) -> None:
    if tensor.device.type != "cpu":
        raise ValueError(
            f"{name} is on {tensor.device}, but the CPU kernels (backend 'numba-cpu') run on "
            "the CPU: move it with .cpu(), or use backend 'numba' on a GPU"
        )


def use_torch_threads() -> None:
    """Run the next parallel loop on as many threads as torch uses (at most Numba's pool)."""
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
