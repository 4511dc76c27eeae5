"""What every decode kernel is given, and the checks before it is: the one opening that the v1
and v2 kernels and their CPU twins share.

Each of the four wrappers (``paged_attention_decode`` and ``paged_attention_decode_v2``, in
``cuda_kernels`` and ``cuda_kernels.cpu``) checks its inputs with ``check_decode_inputs`` and
passes ``decode_arguments``: the query, the pools, the block tables and lengths, the scale,
then FP8's per-KV-head scales and its decode table (``cuda_kernels.fp8.decode_table``). Each
passes its own launcher's ``check_device`` and ``kernel_array`` (a GPU or simulator array, or
a NumPy view for the twins); only what a kernel writes differs from one wrapper to the next.

Why the checks remember layouts: an engine calls a kernel once per layer per step, with
tensors whose kinds, dtypes, devices and shapes repeat from call to call while their values
change. Checked in full every time (``minipaged.contract.check_attention_inputs``), they cost
a call from cold caches, as a layer's attention starts after its projections have evicted
them, about 0.26 ms of Python on the two-core machine this was written on, against 2 ms for
the whole of a one-sequence, 1,024-token Llama-3-8B layer. So the first call with a layout
(``layout_key``: every tensor's type, dtype, device, shape and strides, and the scale and
$B$ with their types) runs every check and remembers that the layout passed; a later call
with the same layout checks only what the layout does not decide, the values of ``seq_lens``
and ``block_tables`` (``check_values``), with the contract's own code and messages. A tensor
that changed in any way the key does not see changes only its values, and those are checked
on every call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch

from cuda_kernels.fp8 import check_pools, decode_table, head_scales
from minipaged.contract import check_attention_inputs, check_block_tables, check_query_lens

KernelArray = Callable[[torch.Tensor, str], object]
"""A launcher's ``kernel_array(tensor, name)``: the tensor as its kernels take it."""

CheckDevice = Callable[[torch.Tensor, str], None]
"""A launcher's ``check_device(tensor, name)``: refuses a tensor its kernels cannot reach."""

MAX_LAYOUTS = 64
"""How many passed layouts ``check_decode_inputs`` remembers: a model's few (one per batch
size and table width in use) many times over; the oldest is forgotten first."""

passed_layouts: dict[tuple, int] = {}
"""Layouts that passed every check (``layout_key``), each with its pool's block count."""


def check_decode_inputs(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_size: int,
    check_device: CheckDevice,
) -> None:
    """The tensors on the launcher's device first (its refusal names the launcher's way
    out), then the reference's checks (``minipaged.contract``, which also refuses what is no
    tensor), then what the kernels need besides: float32 compute over float32 or FP8 pools.
    For a layout that passed before, only the checks of the values (see the module's
    docstring): they raise what the full checks would."""
    paged = (query, key_pool, value_pool, block_tables, seq_lens)
    key = layout_key(*paged, scale, block_size, check_device)
    if key in passed_layouts:
        check_values(block_tables, seq_lens, block_size, passed_layouts[key])
        return
    for name, tensor in (("query", query), ("key_pool", key_pool), ("value_pool", value_pool)):
        if isinstance(tensor, torch.Tensor):
            check_device(tensor, name)
    check_attention_inputs(*paged, block_size, scale=scale)
    check_pools(query, key_pool, value_pool)
    if key is not None:
        if len(passed_layouts) >= MAX_LAYOUTS:
            del passed_layouts[next(iter(passed_layouts))]
        passed_layouts[key] = key_pool.shape[0]


def layout_key(
    query, key_pool, value_pool, block_tables, seq_lens, scale, block_size, check_device
) -> tuple | None:
    """Everything the checks read except the values of ``seq_lens`` and ``block_tables``:
    each tensor's type, dtype, device, shape and strides; ``scale`` and ``block_size`` with
    their types (``True == 1``, but ``True`` is no block size); and the launcher's
    ``check_device``. ``None`` for what has no such key (not a tensor, a sparse tensor, an
    unhashable scale): those are checked in full, and refused."""
    try:
        tensors = tuple(
            (type(t), t.dtype, t.device, t.shape, t.stride())
            for t in (query, key_pool, value_pool, block_tables, seq_lens)
        )
        key = (tensors, type(scale), scale, type(block_size), block_size, check_device)
        hash(key)
    except (AttributeError, TypeError, RuntimeError):
        return None
    return key


def check_values(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int, num_blocks: int
) -> None:
    """What ``check_attention_inputs`` checks of a decode call's values, in its order: every
    length $L_b \\ge 1$, then every table row long enough and naming blocks of the pool."""
    lens = seq_lens.tolist()
    check_query_lens(lens, [1] * len(lens))
    check_block_tables(lens, block_tables, block_size, num_blocks)


def decode_arguments(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    kernel_array: KernelArray,
) -> tuple[tuple, tuple]:
    """``(inputs, fp8)``: the kernel arguments every decode kernel reads, in their order,
    ``query, key_pool, value_pool, block_tables, seq_lens, scale``; and ``k_scale, v_scale``
    and the decode table (``fp8_arguments``), which come last."""
    inputs = (
        kernel_array(query.contiguous(), "query"),
        kernel_array(key_pool, "key_pool"),
        kernel_array(value_pool, "value_pool"),
        kernel_array(block_tables.to(torch.int32).contiguous(), "block_tables"),
        kernel_array(seq_lens.to(torch.int32), "seq_lens"),
        np.float32(scale),
    )
    return inputs, fp8_arguments(key_pool, k_scale, v_scale, kernel_array)


def fp8_arguments(
    key_pool: torch.Tensor, k_scale, v_scale, kernel_array: KernelArray
) -> tuple[object, object, object]:
    """``k_scale``, ``v_scale`` (``[num_kv_heads]``) and the 256-entry decode table, as the
    kernels take them: ones and an unused one-entry table for a float32 pool, made once per
    launcher, head count and device, since the kernels only read them."""
    num_kv_heads, device = key_pool.shape[1], key_pool.device
    ones, lut = constant_arguments(key_pool.dtype, num_kv_heads, device, kernel_array)
    return (
        ones
        if k_scale is None
        else kernel_array(head_scales(k_scale, num_kv_heads, device), "k_scale"),
        ones
        if v_scale is None
        else kernel_array(head_scales(v_scale, num_kv_heads, device), "v_scale"),
        lut,
    )


@functools.lru_cache(maxsize=MAX_LAYOUTS)
def constant_arguments(
    dtype: torch.dtype, num_kv_heads: int, device: torch.device, kernel_array: KernelArray
) -> tuple[object, object]:
    """``(ones, lut)`` as ``kernel_array`` makes them: the scales of a pool given none
    (``[num_kv_heads]`` ones), and ``dtype``'s decode table. Kept alive here, so the arrays
    that share their memory stay valid."""
    ones = head_scales(None, num_kv_heads, device)
    return kernel_array(ones, "k_scale"), kernel_array(decode_table(dtype, device), "lut")
