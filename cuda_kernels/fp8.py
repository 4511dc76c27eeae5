"""How the kernels read an FP8 KV cache: Numba has no float8 type, so the pools reach a kernel as
their bytes (``uint8``), and each kernel decodes them to float32 itself.

- ``decode_table(dtype)``: the CUDA kernels' decoder, a 256-entry float32 table whose entry $i$
  is the value of the FP8 byte $i$, built once by torch
  (``torch.arange(256, dtype=uint8).view(dtype).float()``), so the kernels decode exactly as
  torch does;
- ``element(x, table)``: what a CUDA kernel calls where it reads a key or value element:
  ``table[x]`` for a byte, ``x`` itself for a float32 pool. Numba picks the version by the
  pool's element type when it compiles (the overloads below), so one kernel source serves both
  caches;
- ``decode_fields(dtype)`` and ``decoded_row(row, fields, halves, scratch)``: the CPU twins'
  decoder, a whole key or value row decoded once for every query head that reads it, by
  moving each byte's bits into a float16's (``DecodeFields``) instead of looking it up: a
  table lookup is a load at an address that depends on the byte, which keeps a loop out of
  the SIMD lanes, and the bit moves run sixteen bytes at a time. Times the format's
  power-of-two ``multiplier``, it gives torch's value for all 256 bytes of both formats
  (tested);
- the scales: each KV head's ``k_scale`` multiplies its scores and ``v_scale`` its output
  (``head_scales``), since $q \\cdot (s_k \\hat{k}) = s_k (q \\cdot \\hat{k})$ and
  $\\sum p (s_v \\hat{v}) = s_v \\sum p \\hat{v}$: the kernels never multiply element by element
  by a scale.

Writes are quantized before a kernel copies the bytes (``minipaged.backend``), so the cache
operations move bytes and never need to encode FP8.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

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


class DecodeFields(NamedTuple):
    """How a CPU twin turns an FP8 byte into float32 by moving bits (``decoded_row``).

    An FP8 byte is a sign, an exponent $e$ of $E$ bits with bias $b$ and a mantissa $m$ of $M$
    bits: $(-1)^s 2^{e - b} (1 + m / 2^M)$, or $(-1)^s 2^{1 - b} (m / 2^M)$ when $e = 0$ (a
    subnormal). float16 has the same layout, wider: 5 exponent bits with bias 15, 10 mantissa
    bits. Read as a signed byte and shifted left $10 - M$ places (a multiplication by ``step``
    $= 2^{10 - M}$), the byte's mantissa lands on the top of float16's, its exponent on the low
    bits of float16's ($E \\le 5$), and its sign on float16's sign bit (with copies of it
    between, which ``keep`` clears). Those 16 bits, read as a float16, are
    $(-1)^s 2^{e - 15} (1 + m / 2^M)$, or a float16 subnormal $(-1)^s 2^{-14} (m / 2^M)$ when
    $e = 0$: both the byte's value times $2^{b - 15}$. The processor converts float16 to
    float32 exactly, subnormals included (they become float32 normals), eight values in one
    instruction (``vcvtph2ps`` on x86): the byte's value divided by ``multiplier``
    $= 2^{15 - b}$, exactly ($2^8$ for e4m3, and 1 for e5m2, which is float16's top byte).
    The twins do not multiply each element by ``multiplier``: like a KV head's scales, it
    multiplies the scores and the output once (``decoded_row``). Bytes whose low seven bits
    are ``special`` or more are not numbers (e4m3's 0x7F is NaN; e5m2's all-ones exponent is
    inf or NaN): setting all of float16's exponent bits keeps them so, with the payload the
    float32 route gave.

    Why 16 bits: the bit moves then run sixteen bytes to a 256-bit SIMD register, and the
    float32 route this replaced (shift into float32's bits, multiply by $2^{127 - b}$) also
    multiplied float32 subnormals, which many cores handle slowly; a row decoded in about 40%
    of its time (18 against 46 ns for $d_h = 128$ on the two-core machine this was written on).
    Why a multiplication and not ``<<``: Numba computes integer operations in 64 bits, and a
    shift by an amount known only when the kernel runs stays 64-bit, four lanes to a SIMD
    register; a multiplication is narrowed back to 16 bits."""

    step: np.int16  # 2^(10 - M)
    keep: np.int16  # float16's sign bit and the bits under the shifted seven
    special: np.int16  # the smallest low-seven-bits value that is inf or NaN
    multiplier: np.float32  # 2^(15 - b)


HALF_EXPONENT_BITS = np.int16(0x7C00)
"""float16's exponent, all ones: inf with a zero mantissa, NaN otherwise."""

LOW_SEVEN = np.int16(0x7F)
"""An FP8 byte without its sign."""


HALF_IN_HARDWARE = ("x86_64", "f16c"), ("aarch64", None), ("arm64", None)
"""The targets whose processors convert float16 to float32 themselves: (the start of LLVM's
target triple, the feature it needs, if any). x86 cores have done it since 2012 (F16C), but a
core without it, or Numba told to compile for a plain ``x86-64`` with no features
(``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``), would make LLVM call a runtime function Numba's
JIT does not have, and the process would abort."""


def converts_half_in_hardware(target: tuple[str, str, str]) -> bool:
    """Whether Numba's compile ``target`` ((triple, cpu name, features), as its codegen's
    ``magic_tuple()`` gives it) has an instruction for float16 to float32."""
    triple, _, features = target
    return any(
        triple.startswith(arch) and (need is None or f"+{need}" in features.split(","))
        for arch, need in HALF_IN_HARDWARE
    )


@intrinsic
def half_to_float(typingctx, bits):
    """The float16 whose bits are ``bits`` (an ``int16``), as float32, exactly: LLVM's
    ``fpext``, which LLVM vectorizes to one conversion instruction per eight values. Numba has
    no float16 arithmetic on the CPU, so the conversion is written in LLVM's IR. On a target
    without the instruction (``converts_half_in_hardware``) it moves the bits instead, as
    ``DecodeFields`` moves a byte's, one level up: shifted 13 places into float32's, the sign
    copies cleared, all exponent bits set for inf and NaN, times $2^{127 - 15}$."""
    signature = types.float32(bits)

    def codegen(context, builder, sig, args):
        f32 = ir.FloatType()
        if converts_half_in_hardware(context.codegen().magic_tuple()):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), f32)
        i32 = ir.IntType(32)
        wide = builder.sext(args[0], i32)  # the sign copied into bits 16 to 31
        moved = builder.and_(builder.shl(wide, i32(13)), i32(0x8FFFFFFF - (1 << 32)))
        special = builder.icmp_signed("==", builder.and_(wide, i32(0x7C00)), i32(0x7C00))
        bits = builder.or_(moved, builder.select(special, i32(0x7F800000), i32(0)))
        return builder.fmul(builder.bitcast(bits, f32), ir.Constant(f32, 2.0**112))

    return signature, codegen


def decoded_row(row, fields, halves, scratch):
    """A key or value row (``[head_dim]``) as float32 divided by ``fields.multiplier``, for a
    CPU twin that reads it once for every query head of its group: ``row`` itself from a
    float32 pool (whose multiplier is 1); from an FP8 pool, ``scratch`` holding each byte's
    value over ``multiplier`` (``DecodeFields``), decoded once, by way of ``halves``
    (``int16``, ``[head_dim]``), which ends holding the bytes as float16 bits. Decoding inside
    the dot product instead would decode each byte once per query head.

    Since ``multiplier`` is a power of two, $q \\cdot (\\hat{k} / 2^n) = (q \\cdot \\hat{k}) / 2^n$
    exactly, so a twin multiplies it into the score scale (with the KV head's ``k_scale``)
    and the output's ``v_scale``, once per KV head, and the decode loop has no
    multiplication by it: per eight bytes one instruction of eleven fewer, and the FP8 twin
    3-4% faster (paired rounds, one thread, Llama-3-8B shapes, $L$ = 1,024).

    This Python body runs with Numba's compiler off (``NUMBA_DISABLE_JIT=1``, to step through
    a twin in a debugger); compiled twins use the overload below, which does the same a byte
    at a time."""
    if row.dtype == np.uint8:
        byte = row.view(np.int8).astype(np.int16)
        bits = (byte * fields.step) & fields.keep
        bits[(byte & LOW_SEVEN) >= fields.special] |= HALF_EXPONENT_BITS
        halves[:] = bits
        with np.errstate(invalid="ignore"):  # e5m2's signalling NaNs stay NaN, quietly
            scratch[:] = halves.view(np.float16).astype(np.float32)
        return scratch
    return row


@overload(decoded_row, inline="always")
def decoded_row_overload(row, fields, halves, scratch):
    """Inlined into the twin's loop (Numba's IR inlining), not called: a call returns
    ``scratch`` as a new reference, and its count goes up in the call and down in the caller,
    two atomic operations per row, which made the FP8 twin about 7% slower on one thread and
    about 18% on two (paired rounds, Llama-3-8B shapes, L = 1,024).

    Two loops, not one: LLVM vectorizes a loop by the width of its widest type, so with the
    conversion to float32 in it the bit moves also ran eight at a time, in 128-bit registers
    (``inspect_asm``); alone, the bit moves run sixteen bytes a 256-bit step, and the
    conversion eight values an instruction. The FP8 twin was 4-7% faster for it (paired
    rounds, one thread, Llama-3-8B shapes, $L$ = 1,024)."""
    if isinstance(row.dtype, types.Integer):

        def decode(row, fields, halves, scratch):
            for d in range(row.shape[0]):  # no branch, no lookup: sixteen bytes a SIMD step
                byte = np.int16(np.int8(row[d]))  # the sign copied into bits 8 to 15
                special = np.int16(np.int16(byte & LOW_SEVEN) >= fields.special)  # 1 or 0
                bits = np.int16(np.int16(byte * fields.step) & fields.keep)
                halves[d] = np.int16(bits | np.int16(special * HALF_EXPONENT_BITS))
            for d in range(row.shape[0]):  # float16 to float32: eight values an instruction
                scratch[d] = half_to_float(halves[d])
            return scratch

        return decode
    return lambda row, fields, halves, scratch: row


@functools.cache
def decode_fields(dtype: torch.dtype) -> DecodeFields:
    """``dtype``'s ``DecodeFields``, read from torch's own description of the format: $M$ from
    its epsilon $2^{-M}$, the bias $b$ from its smallest normal $2^{1 - b}$, and ``special``
    from the first byte torch decodes to inf or NaN. A float32 pool needs none: unused fields.
    """
    if dtype not in FP8_DTYPES:
        return DecodeFields(np.int16(0), np.int16(0), np.int16(0), np.float32(1.0))
    info = torch.finfo(dtype)
    mantissa_bits = round(-math.log2(info.eps))
    bias = 1 - round(math.log2(info.tiny))
    shift = 10 - mantissa_bits
    values = torch.arange(128, dtype=torch.uint8).view(dtype).float()
    special = int(torch.nonzero(~torch.isfinite(values))[0])
    keep = np.uint16(0x8000 | ((1 << (7 + shift)) - 1)).view(np.int16)
    return DecodeFields(
        np.int16(1 << shift), keep, np.int16(special), np.float32(2.0 ** (15 - bias))
    )


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


def head_scales(values: tuple[float, ...], device) -> torch.Tensor:
    """``[num_kv_heads]`` float32 scales for a kernel, one per KV head, from their values (ones
    for a float pool)."""
    return torch.tensor(values, dtype=torch.float32, device=device)


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
