"""How a torch tensor reaches a Numba kernel, and the launch settings picked at import.

One process is either Numba's CUDA simulator or the real CUDA compiler, never both: the choice
is made by ``NUMBA_ENABLE_CUDASIM=1`` in the environment before numba is first imported. Two
things follow from it, so both are decided here, once:

- what a kernel receives: under the simulator a *numpy view* of a CPU tensor
  (``tensor.numpy()`` shares its memory, so a kernel's writes land in the tensor); on a GPU a
  Numba device array built from the tensor's ``__cuda_array_interface__`` (no copy either);
- ``NUM_THREADS``, threads per thread block: the simulator runs one OS thread per CUDA
  thread, so it gets one warp (32); a GPU gets four warps (128), as vLLM's decode kernel.

A simulating process also gets the simulator's shared arrays repaired
(``cuda_kernels.simulator``): without it, threads that reach a ``cuda.shared.array`` line
together could each get an array of their own.

Kernels run on torch's current CUDA stream, so they are ordered with the torch operations
around them without extra synchronization.
"""

from __future__ import annotations

import torch
from numba import config, cuda

from cuda_kernels import simulator
from cuda_kernels.fp8 import as_bytes

SIMULATOR = bool(config.ENABLE_CUDASIM)
"""True when this process runs kernels in Numba's CUDA simulator, on the CPU."""
if SIMULATOR:
    simulator.install()

WARP_SIZE = 32
NUM_THREADS = WARP_SIZE if SIMULATOR else 4 * WARP_SIZE
"""Threads per thread block for every kernel in this package: $T$ in the docstrings."""


def kernel_array(tensor: torch.Tensor, name: str):
    """The array a kernel reads or writes in place of ``tensor``, sharing its memory. An FP8
    tensor arrives as its bytes (``cuda_kernels.fp8``)."""
    check_device(tensor, name)
    tensor = as_bytes(tensor)
    if SIMULATOR:
        return tensor.detach().numpy()
    return cuda.as_cuda_array(tensor.detach(), sync=False)


def check_device(tensor: torch.Tensor, name: str) -> None:
    """Kernels reach CUDA tensors on a GPU, and CPU tensors under the simulator."""
    if SIMULATOR and tensor.device.type != "cpu":
        raise ValueError(
            f"{name} is on {tensor.device}, but Numba's CUDA simulator runs on the CPU: "
            "move it with .cpu(), or unset NUMBA_ENABLE_CUDASIM to use the GPU"
        )
    if not SIMULATOR and tensor.device.type != "cuda":
        raise ValueError(
            f"{name} is on {tensor.device}, but the Numba kernels run on a CUDA GPU: move it "
            "with .cuda(), or set NUMBA_ENABLE_CUDASIM=1 before numba is imported to run the "
            "kernels in the simulator on the CPU"
        )


def transfer_array(tensor: torch.Tensor):
    """``tensor`` for a block copy (``cuda_kernels.swap_blocks``): a Numba device array for a
    CUDA tensor, a numpy view for a CPU tensor. Under the simulator every tensor is on the CPU."""
    tensor = as_bytes(tensor)
    if tensor.device.type == "cuda":
        return cuda.as_cuda_array(tensor.detach(), sync=False)
    return tensor.detach().numpy()


def launch_stream():
    """torch's current CUDA stream as a Numba stream; the simulator has no streams (0)."""
    if SIMULATOR:
        return 0
    return cuda.external_stream(torch.cuda.current_stream().cuda_stream)
