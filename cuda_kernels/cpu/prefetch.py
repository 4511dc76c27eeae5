"""``prefetch(array, index)``: ask the core to fetch the cache line holding ``array[index]`` into
its L2 cache now, and go on without waiting for it.

Why the twins need it and the CUDA kernels do not: after the last token of a physical block,
the block table sends a kernel to another block anywhere in the pool. A GPU hides the wait for
that memory with the other warps it keeps in flight. A CPU core runs one iteration at a time,
and its hardware prefetcher, which learns from the addresses it has seen, cannot guess where
$\\mathcal{T}_r[j + 1]$ points: without help, every jump starts with a wait for memory. So the
twin names the next round's key and value rows while it scores this round's: each token asks
for its own row of the next round (through the table, so across blocks), a few lines at a time
between its dot products. Asking instead for all of block $\\mathcal{T}_r[j + 1]$ at the first
token of block $j$ (256 lines at once for $B = 16$, $d_h = 128$, fp32) made the twin about 20%
slower on the two-core machine this was written on, most likely because a burst that long
fills the core's queue of outstanding misses and the dot products' own loads wait behind it.

It compiles to LLVM's ``llvm.prefetch`` intrinsic (``prefetcht1`` on x86), which changes no
value and cannot fault: a hint, so the twins compute exactly what they did without it.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

READ = 0
"""``llvm.prefetch``'s first flag: the line will be read, not written."""

L2 = 2
"""Its locality: keep the line in the L2 cache (and L3), not L1, where this round's rows are."""

DATA = 1
"""Its cache type: data, not instructions."""

LINE_BYTES = 64
"""The cache line of x86 and most ARM cores."""


@intrinsic
def prefetch(typingctx, array, index):
    """Fetch the line of ``array[index]`` (a 1-d array, an integer index); returns nothing."""
    signature = types.void(array, index)

    def codegen(context, builder, sig, args):
        array_type, _ = sig.args
        view = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]])
        i32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32])
        hint = cgutils.get_or_insert_function(builder.module, function_type, "llvm.prefetch.p0")
        builder.call(hint, [pointer, i32(READ), i32(L2), i32(DATA)])
        return context.get_dummy_value()

    return signature, codegen
