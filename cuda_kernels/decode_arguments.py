"""What every decode kernel is given, and the checks before it is: the one opening that the v1
and v2 kernels and their CPU twins share.

Each of the four wrappers (``paged_attention_decode`` and ``paged_attention_decode_v2``, in
``cuda_kernels`` and ``cuda_kernels.cpu``) checks its inputs with ``check_decode_inputs`` and
passes ``decode_arguments``: the query, the pools, the block tables and lengths, the scale,
then FP8's per-KV-head scales and its decoder (``cuda_kernels.fp8``): the CUDA kernels' decode
table (``by_table``), or the twins' bit fields (``by_fields``). Each passes its own
launcher's ``check_device`` and ``kernel_array`` (a GPU or simulator array, or a NumPy view
for the twins); only what a kernel writes differs from one wrapper to the next.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from cuda_kernels.fp8 import check_pools, decode_fields, decode_table, head_scales
from minipaged.contract import check_attention_inputs

KernelArray = Callable[[torch.Tensor, str], object]
"""A launcher's ``kernel_array(tensor, name)``: the tensor as its kernels take it."""

Decoder = Callable[[torch.dtype, torch.device, KernelArray], object]
"""How a kernel decodes an FP8 pool of a dtype: the argument it takes for that, its last."""


def by_table(dtype: torch.dtype, device: torch.device, kernel_array: KernelArray) -> object:
    """The CUDA kernels' decoder: the 256-entry table (``cuda_kernels.fp8.decode_table``)."""
    return kernel_array(decode_table(dtype, device), "lut")


def by_fields(dtype: torch.dtype, device: torch.device, kernel_array: KernelArray) -> object:
    """The CPU twins' decoder: the format's bit fields (``cuda_kernels.fp8.DecodeFields``)."""
    return decode_fields(dtype)


def check_decode_inputs(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_size: int,
    check_device: Callable[[torch.Tensor, str], None],
) -> None:
    """The tensors on the launcher's device first (its refusal names the launcher's way
    out), then the reference's checks (``minipaged.contract``, which also refuses what is no
    tensor), then what the kernels need besides: float32 compute over float32 or FP8 pools."""
    for name, tensor in (("query", query), ("key_pool", key_pool), ("value_pool", value_pool)):
        if isinstance(tensor, torch.Tensor):
            check_device(tensor, name)
    check_attention_inputs(
        query, key_pool, value_pool, block_tables, seq_lens, block_size, scale=scale
    )
    check_pools(query, key_pool, value_pool)


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
    inputs = (
        kernel_array(query.contiguous(), "query"),
        kernel_array(key_pool, "key_pool"),
        kernel_array(value_pool, "value_pool"),
        kernel_array(block_tables.to(torch.int32).contiguous(), "block_tables"),
        kernel_array(seq_lens.to(torch.int32), "seq_lens"),
        np.float32(scale),
    )
    return inputs, fp8_arguments(key_pool, k_scale, v_scale, kernel_array, decoder)


def fp8_arguments(
    key_pool: torch.Tensor, k_scale, v_scale, kernel_array: KernelArray, decoder: Decoder
) -> tuple[object, object, object]:
    """``k_scale``, ``v_scale`` (``[num_kv_heads]``) and the decoder's argument, as the kernels
    take them: ones and an unused decoder for a float32 pool."""
    num_kv_heads, device = key_pool.shape[1], key_pool.device
    return (
        kernel_array(head_scales(k_scale, num_kv_heads, device), "k_scale"),
        kernel_array(head_scales(v_scale, num_kv_heads, device), "v_scale"),
        decoder(key_pool.dtype, device, kernel_array),
    )
