"""A tensor handed to a CPU twin by its address, and seen as an array only inside compiled code.

Why: the v1 twin's call gets four tensors that are new on every call (the output, the query,
the block tables $\\mathcal{T}$ and the lengths $L$). Given as NumPy views (``tensor.numpy()``,
``launch.kernel_array``), each costs Python a new array object and Numba the typing of it:
from cold caches, as a layer's attention starts, about 0.05 ms of a call of 0.7 ms over
1,024 tokens on two threads (one sequence, Llama-3-8B shapes, paired rounds), enough to decide
whether the twin beat SDPA there. An address is one integer (``tensor.data_ptr()``), and
``array_at`` makes the same view in compiled code, for no Python at all. The pools, made once
(``cuda_kernels.pool_arrays``), and the v2 twin, whose long calls do not feel 0.05 ms, keep
``kernel_array``.

The price is the one a CUDA launch pays: an address says nothing of what lies there. So the
caller keeps three promises for each tensor it passes by address: it is contiguous (a view of
it in row-major order is the tensor), of the dtype ``array_at`` is given, and alive until the
kernel returns (the caller holds it in a local).
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import njit, types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload
from numba.np.numpy_support import carray


def pointer(address: int, dtype: type) -> object:
    """The integer ``address`` as a pointer to ``dtype`` elements. In compiled code, an LLVM
    ``inttoptr`` (``as_pointer``); in Python (Numba's compiler off, to step through a twin),
    a ``ctypes`` pointer, which ``carray`` takes as well."""
    return ctypes.cast(address, ctypes.POINTER(np.ctypeslib.as_ctypes_type(dtype)))


@intrinsic
def as_pointer(typingctx, address, dtype):
    """``pointer`` in compiled code."""
    if not isinstance(address, types.Integer) or not isinstance(dtype, types.NumberClass):
        raise TypingError("pointer(address, dtype) takes an integer and a NumPy scalar type")
    signature = types.CPointer(dtype.instance_type)(address, dtype)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(sig.return_type))

    return signature, codegen


@overload(pointer)
def compiled_pointer(address, dtype):
    """What compiled code runs for ``pointer``: ``as_pointer``."""
    return lambda address, dtype: as_pointer(address, dtype)


@njit(cache=True)
def array_at(address, shape, dtype):
    """The C-contiguous array of ``shape`` and ``dtype`` whose first element is at
    ``address``: a view, so a write lands in the tensor there."""
    return carray(pointer(address, dtype), shape)
