"""What every decode kernel is given, and the checks before it is: the one opening that the v1
and v2 kernels and their CPU twins share.

Each of the four wrappers (``paged_attention_decode`` and ``paged_attention_decode_v2``, in
``cuda_kernels`` and ``cuda_kernels.cpu``) checks its inputs with ``check_decode_inputs`` and
passes ``decode_arguments``: the query, the pools, the block tables and lengths, the scale,
then FP8's per-KV-head scales and its decoder (``cuda_kernels.fp8``): the CUDA kernels' decode
table (``by_table``), or the twins' bit fields (``by_fields``). Each passes its own
launcher's ``check_device`` and ``kernel_array`` (a GPU or simulator array, or a NumPy view
for the twins); only what a kernel writes differs from one wrapper to the next. The v1 twin
alone passes its per-call tensors (``per_call_tensors``) by address instead of as views
(``cuda_kernels.cpu.addresses`` says why), and the rest as ``layer_arguments`` makes them.

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
on every call. The v1 twin goes one step further: its kernel checks those values itself
before it reads a key (``cuda_kernels.cpu.paged_attention.tables_fit``), and only a call it
refuses runs ``check_values``, for the refusal's words.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch

from cuda_kernels.fp8 import check_pools, decode_fields, decode_table, head_scales
from cuda_kernels.pool_arrays import pool_array
from minipaged.attention_call import scale_values
from minipaged.contract import check_attention_inputs, check_block_tables, check_query_lens

KernelArray = Callable[[torch.Tensor, str], object]
"""A launcher's ``kernel_array(tensor, name)``: the tensor as its kernels take it."""

Decoder = Callable[[torch.dtype, torch.device, KernelArray], object]
"""How a kernel decodes an FP8 pool of a dtype: the argument it takes for that, its last."""

CheckDevice = Callable[[torch.Tensor, str], None]
"""A launcher's ``check_device(tensor, name)``: refuses a tensor its kernels cannot reach."""

MAX_LAYOUTS = 64
"""How many passed layouts ``check_decode_inputs`` remembers: a model's few (one per batch
size and table width in use) many times over; the oldest is forgotten first."""

passed_layouts: dict[tuple, int] = {}
"""Layouts that passed every check (``layout_key``), each with its pool's block count."""


def by_table(dtype: torch.dtype, device: torch.device, kernel_array: KernelArray) -> object:
    """The CUDA kernels' decoder: the 256-entry table (``cuda_kernels.fp8.decode_table``)."""
    return kernel_array(decode_table(dtype, device), "lut")


def by_fields(dtype: torch.dtype, device: torch.device, kernel_array: KernelArray) -> tuple:
    """The CPU twins' decoder: the format's bit fields (``cuda_kernels.fp8.DecodeFields``), as
    a plain tuple, which each twin names again inside (``DecodeFields(*decoder)``). Numba
    types a named tuple argument in Python on every call, where it types a plain tuple in C:
    from cold caches that cost a twin's call about 0.03 ms (on the machine this was written on,
    a call over 16 tokens took about 0.5 ms)."""
    return tuple(decode_fields(dtype))


def check_decode_inputs(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_size: int,
    check_device: CheckDevice,
    kernel_checks_values: bool = False,
) -> None:
    """The tensors on the launcher's device first (its refusal names the launcher's way
    out), then the reference's checks (``minipaged.contract``, which also refuses what is no
    tensor), then what the kernels need besides: float32 compute over float32 or FP8 pools.
    For a layout that passed before, only the checks of the values (see the module's
    docstring): they raise what the full checks would. With ``kernel_checks_values``, for a
    kernel that checks the values itself before it reads a key, and whose caller then runs
    ``check_values`` to refuse them (the v1 twin's ``tables_fit``), not even those, unless
    the tables or lengths are not int32: the kernel reads them narrowed to int32
    (``as_int32``), where an id of $2^{40}$ would read as block 0."""
    paged = (query, key_pool, value_pool, block_tables, seq_lens)
    key = layout_key(*paged, scale, block_size, check_device)
    if key in passed_layouts:
        int32 = block_tables.dtype == seq_lens.dtype == torch.int32
        if not (kernel_checks_values and int32):
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
    decoder: Decoder = by_table,
) -> tuple[tuple, tuple]:
    """``(inputs, fp8)``: the kernel arguments every decode kernel reads, in their order,
    ``query, key_pool, value_pool, block_tables, seq_lens, scale``; and ``k_scale, v_scale``
    and what ``decoder`` gives (``fp8_arguments``), which come last."""
    query, block_tables, seq_lens = per_call_tensors(query, block_tables, seq_lens)
    keys, values, scale, fp8 = layer_arguments(
        key_pool, value_pool, scale, k_scale, v_scale, kernel_array, decoder
    )
    inputs = (
        kernel_array(query, "query"),
        keys,
        values,
        kernel_array(block_tables, "block_tables"),
        kernel_array(seq_lens, "seq_lens"),
        scale,
    )
    return inputs, fp8


def layer_arguments(
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    scale: float,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    kernel_array: KernelArray,
    decoder: Decoder,
) -> tuple[object, object, np.float32, tuple]:
    """``(keys, values, scale, fp8)``: the arguments that stay the same from one call of a
    layer to the next, each made once and looked up after: the pools' arrays (``pool_array``),
    the scale (``kernel_scale``) and the FP8 ones (``fp8_arguments``). ``per_call_tensors``
    are the others."""
    keys = pool_array(key_pool, "key_pool", kernel_array)
    values = pool_array(value_pool, "value_pool", kernel_array)
    fp8 = fp8_arguments(key_pool, k_scale, v_scale, kernel_array, decoder)
    return keys, values, kernel_scale(scale), fp8


def per_call_tensors(
    query: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tensors a decode kernel is given anew on every call, as every kernel reads them:
    the query contiguous, the tables and lengths int32 (``as_int32``) and contiguous. Each is
    the tensor itself when it already is so."""
    return query.contiguous(), as_int32(block_tables).contiguous(), as_int32(seq_lens).contiguous()


@functools.lru_cache(maxsize=MAX_LAYOUTS)
def kernel_scale(scale: float) -> np.float32:
    """``scale`` as the float32 every kernel takes, made once per value: a model passes the
    same $1 / \\sqrt{d_h}$ on every call, and from cold caches making a NumPy scalar cost a
    call about 0.02 ms. (The checks have refused every scale but a finite positive number.)"""
    return np.float32(scale)


def as_int32(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as int32: itself when it is already, since ``.to`` costs about 0.05 ms
    from cold caches even when it has nothing to convert."""
    return tensor if tensor.dtype == torch.int32 else tensor.to(torch.int32)


def output_like(query: torch.Tensor) -> torch.Tensor:
    """An uninitialized ``[batch, num_heads, head_dim]`` output, contiguous whatever the
    strides of ``query``. (``torch.empty_like`` took half the time of ``torch.empty`` with
    the query's shape, dtype and device, about 0.06 against 0.12 ms from cold caches.)"""
    return torch.empty_like(query, memory_format=torch.contiguous_format)


def fp8_arguments(
    key_pool: torch.Tensor, k_scale, v_scale, kernel_array: KernelArray, decoder: Decoder
) -> tuple[object, object, object]:
    """``k_scale``, ``v_scale`` (``[num_kv_heads]``) and the decoder's argument, as the kernels
    take them: ones and an unused decoder for a float32 pool. The kernels only read them, so
    each is made once and kept: a scale's array for its values (``scale_array``), the
    decoder's argument for the launcher, decoder, dtype and device (``decoder_argument``).
    Scales on a GPU are converted where they are instead, without reading their values:
    ``tolist`` there would make the host wait for the GPU once per layer per step, the sync
    ``attention_call.engine_attention`` exists to avoid. Where a scale lies is asked with
    ``is_cpu``, which makes no ``torch.device`` object as ``scale.device`` does: from cold
    caches every attribute read costs microseconds, on every FP8 call."""
    num_kv_heads, device = key_pool.shape[1], key_pool.device
    if k_scale is None and v_scale is None:  # a float32 pool's every call takes this way
        return unscaled_arguments(key_pool.dtype, num_kv_heads, device, kernel_array, decoder)

    def given(scale: torch.Tensor | None) -> object:
        if scale is not None and not scale.is_cpu:
            return kernel_array(scale.to(device, torch.float32).contiguous(), "scales")
        values = (1.0,) * num_kv_heads if scale is None else scale_values(scale)
        return scale_array(values, device, kernel_array)

    decoded = decoder_argument(key_pool.dtype, device, kernel_array, decoder)
    return given(k_scale), given(v_scale), decoded


@functools.lru_cache(maxsize=MAX_LAYOUTS)
def unscaled_arguments(
    dtype: torch.dtype,
    num_kv_heads: int,
    device: torch.device,
    kernel_array: KernelArray,
    decoder: Decoder,
) -> tuple[object, object, object]:
    """``fp8_arguments`` of a call given no scale, looked up once rather than three times:
    ones for both scales, and the decoder's argument. From cold caches each lookup costs
    microseconds, on the float32 twin's every call."""
    ones = scale_array((1.0,) * num_kv_heads, device, kernel_array)
    return ones, ones, decoder_argument(dtype, device, kernel_array, decoder)


SCALE_ARRAYS = 1024
"""How many scale arrays ``scale_array`` keeps: a model's two a layer, for every layer of the
deepest model in use many times over (80 layers, 160 arrays, for Llama-3-70B), so a step's
walk through the layers never forgets the array the next step asks for first."""


@functools.lru_cache(maxsize=SCALE_ARRAYS)
def scale_array(values: tuple[float, ...], device: torch.device, kernel_array: KernelArray):
    """``[num_kv_heads]`` float32 scales with ``values``, as ``kernel_array`` makes them, made
    once for those values. Keyed by the values, not by the tensor that held them: an engine
    hands each call a new view of its scales (``KVCache.scales``), and values read in this
    call (``attention_call.scale_values``: the entry point's check's read, or one ``tolist``
    where it read none) can never stand for others.
    The values are rounded to float32 as ``.to(torch.float32)`` rounds them; each array is
    kept alive here, so the memory a kernel array shares stays valid. From cold caches,
    ``fp8_arguments`` for an FP8 pool took 0.09 ms this way on the machine this was written
    on, where converting each of the caller's tensors and viewing it on every call took 0.21
    (a float32 pool's: 0.06)."""
    return kernel_array(head_scales(values, device), "scales")


@functools.lru_cache(maxsize=MAX_LAYOUTS)
def decoder_argument(
    dtype: torch.dtype, device: torch.device, kernel_array: KernelArray, decoder: Decoder
) -> object:
    """What ``decoder`` gives for ``dtype``, made once per launcher, decoder, dtype and
    device, and kept alive here, so the array that shares its memory stays valid."""
    return decoder(dtype, device, kernel_array)
