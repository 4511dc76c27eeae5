"""How the kernels read an FP8 KV cache: Numba has no float8 type, so the pools reach a kernel as
their bytes (``uint8``), and each kernel decodes them to float32 itself.

- ``decode_table(dtype)``: every kernel's decoder, a 256-entry float32 table whose entry $i$
  is the value of the FP8 byte $i$, built once by torch
  (``torch.arange(256, dtype=uint8).view(dtype).float()``), so the kernels decode exactly as
  torch does, all 256 bytes of both formats;
- ``element(x, table)``: what a CUDA kernel calls where it reads a key or value element:
  ``table[x]`` for a byte, ``x`` itself for a float32 pool. Numba picks the version by the
  pool's element type when it compiles (the overloads below), so one kernel source serves both
  caches;
- ``decoded_row(row, table, scratch)``: what a CPU twin calls instead, the same lookups for a
  whole key or value row at once, before the query heads of its group read it, so each byte is
  decoded once and the dot products run over float32 in SIMD lanes. The lookups themselves are
  scalar loads from a 1 KiB table that stays in L1: on the two-core machine this was written
  on, decoding a 128-byte row and scoring it for four heads took 84 ns this way against 108 ns
  when each byte's bits were moved into a float32's eight lanes at a time (sign extension,
  a 32-bit multiply, masks and a compare: about eleven instructions for every eight bytes);
- the scales: each KV head's ``k_scale`` multiplies its scores and ``v_scale`` its output
  (``head_scales``), since $q \\cdot (s_k \\hat{k}) = s_k (q \\cdot \\hat{k})$ and
  $\\sum p (s_v \\hat{v}) = s_v \\sum p \\hat{v}$: the kernels never multiply element by element
  by a scale.

Writes are quantized before a kernel copies the bytes (``minipaged.backend``), so the cache
operations move bytes and never need to encode FP8.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from numba import types
from numba.extending import overload

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def element(x, table):
    """A pool element as float32: ``table[x]`` for an FP8 byte, else ``x``. This Python body
    runs under the CUDA simulator; compiled kernels use the overloads below."""
    if isinstance(x, np.integer):
        return table[x]
    return x


def element_overload(x, table):
    """``element`` for Numba's CUDA compiler, chosen by the pool's element type; registered by
    ``cuda_kernels.paged_attention``. (The CPU twins decode whole rows: ``decoded_row``.)"""
    if isinstance(x, types.Integer):
        return lambda x, table: table[x]
    return lambda x, table: x


def decoded_row(row, table, scratch):
    """A key or value row (``[head_dim]``) as float32, for a CPU twin that reads it once for
    every query head of its group: ``row`` itself from a float32 pool; from an FP8 pool,
    ``scratch`` holding ``table[byte]`` for each byte (``decode_table``), looked up once.
    Decoding inside the dot product instead would decode each byte once per query head. This
    Python body runs with Numba's compiler off (``NUMBA_DISABLE_JIT=1``, to step through a
    twin in a debugger); compiled twins use the overload below, which does the same a byte at
    a time."""
    if row.dtype == np.uint8:
        scratch[:] = table[row]
        return scratch
    return row


@overload(decoded_row)
def decoded_row_overload(row, table, scratch):
    if isinstance(row.dtype, types.Integer):

        def decode(row, table, scratch):
            for d in range(row.shape[0]):  # one load from the 1 KiB table, which stays in L1
                scratch[d] = table[row[d]]
            return scratch

        return decode
    return lambda row, table, scratch: row


@functools.cache
def decode_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[256]`` float32: entry $i$ is FP8 byte $i$'s value in ``dtype`` (NaN bytes stay NaN,
    and are never written: writes clamp). A float32 pool needs no table: one unused entry."""
    if dtype not in FP8_DTYPES:
        return torch.zeros(1, device=device)
    return torch.arange(256, dtype=torch.uint8).view(dtype).float().to(device)


def as_bytes(pool: torch.Tensor) -> torch.Tensor:
    """An FP8 pool viewed as its bytes (same memory), which Numba can take; others as they
    are."""
    return pool.view(torch.uint8) if pool.dtype in FP8_DTYPES else pool


def head_scales(scale: torch.Tensor | None, num_kv_heads: int, device) -> torch.Tensor:
    """``[num_kv_heads]`` float32 scales for a kernel: ``scale``, or ones for a float pool."""
    if scale is None:
        return torch.ones(num_kv_heads, device=device)
    return scale.to(device=device, dtype=torch.float32).contiguous()


def check_pools(query: torch.Tensor, key_pool: torch.Tensor, value_pool: torch.Tensor) -> None:
    """The attention kernels compute in float32 and read float32 or FP8 pools of one dtype."""
    if query.dtype != torch.float32:
        raise ValueError(
            f"query has dtype {query.dtype}, but the Numba kernels compute in float32: "
            "cast it with .float() first"
        )
    for name, pool in (("key_pool", key_pool), ("value_pool", value_pool)):
        if pool.dtype != torch.float32 and pool.dtype not in FP8_DTYPES:
            raise ValueError(
                f"{name} has dtype {pool.dtype}; the Numba kernels read float32 or FP8 "
                f"({', '.join(map(str, FP8_DTYPES))}) pools: cast it with .float() first"
            )
    if key_pool.dtype != value_pool.dtype:
        raise ValueError(
            f"key_pool ({key_pool.dtype}) and value_pool ({value_pool.dtype}) must have one dtype"
        )
