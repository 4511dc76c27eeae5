"""The CPU twins of the CUDA kernels: the same names, signatures and loop nests, compiled by
Numba for the CPU (``@njit(parallel=True)``) instead of the GPU.

Where a CUDA kernel launches one thread block per item of its grid, its twin runs one
iteration of a ``prange`` loop per item, spread over the CPU's cores; where the CUDA kernel's
$T$ threads each take one token of a round, the twin loops over ``thread`` in the same round.
Decode attention gives each iteration a (sequence, KV head) rather than a (sequence, query
head): the iteration attends all $N_Q / N_{KV}$ query heads of the group, so it reads each key
and value once, where a GPU relies on its cache to share them between thread blocks.

Lay ``cuda_kernels/paged_attention.py`` beside ``cuda_kernels/cpu/paged_attention.py`` to see
one computation written for both machines. They take CPU float32 tensors and return what the
reference (``minipaged.attention``) returns; ``minipaged.backend`` selects them with
``backend="numba-cpu"``.

Numba's on-disk cache of the twins is stamped with every source file of the package
(``compile_cache``, imported first so that it is in place before any twin is compiled): an edit
to a helper such as ``cuda_kernels/fp8.py`` is compiled in, never served stale.
"""

from cuda_kernels.cpu import compile_cache  # noqa: F401  (first: see above)
from cuda_kernels.cpu.cache_ops import copy_blocks, reshape_and_cache, swap_blocks
from cuda_kernels.cpu.paged_attention import paged_attention_decode
from cuda_kernels.cpu.paged_attention_v2 import paged_attention_decode_v2

__all__ = [
    "copy_blocks",
    "paged_attention_decode",
    "paged_attention_decode_v2",
    "reshape_and_cache",
    "swap_blocks",
]
