"""Numba CUDA kernels for minipaged's paged attention and cache operations.

They take the same arguments and return the same results as the pure-PyTorch reference in
``minipaged.attention``, over the same block tables, slot mappings and cache layout, so any
difference between the two paths is a kernel bug. Runs on a GPU, or on the CPU under Numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).

Importing this package needs neither numba nor a GPU: the kernel modules (and numba) load on
first use of a name below, so the torch path works on machines without the ``cuda`` extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuda_kernels.cache_ops import copy_blocks, reshape_and_cache, swap_blocks
    from cuda_kernels.paged_attention import paged_attention_decode
    from cuda_kernels.paged_attention_v2 import paged_attention_decode_v2

_MODULE_OF = {
    "paged_attention_decode": "cuda_kernels.paged_attention",
    "paged_attention_decode_v2": "cuda_kernels.paged_attention_v2",
    "reshape_and_cache": "cuda_kernels.cache_ops",
    "copy_blocks": "cuda_kernels.cache_ops",
    "swap_blocks": "cuda_kernels.cache_ops",
}

__all__ = [
    "copy_blocks",
    "paged_attention_decode",
    "paged_attention_decode_v2",
    "reshape_and_cache",
    "swap_blocks",
]


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'cuda_kernels' has no attribute {name!r}")
    try:
        module = importlib.import_module(_MODULE_OF[name])
    except ImportError as error:
        raise ImportError(
            f"cuda_kernels.{name} needs numba and numba-cuda ({error}): install them with "
            "pip install 'minipaged[cuda]', or use the torch backend"
        ) from error
    return getattr(module, name)
