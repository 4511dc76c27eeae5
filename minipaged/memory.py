"""KV-cache memory math: the source text's §1–3 as functions a student can call and check.

Sizes use the source text's symbols: $N_L$ layers, $N_Q$ query heads, $N_{KV}$ key-value heads,
$d_h$ head dimension, $b$ bytes per element, $B$ tokens per block, $\\mathcal{T}_r$ a block
table. Waste functions count **tokens**; ``ModelShape.kv_bytes`` turns tokens into bytes
by multiplying by $2 N_L N_{KV} d_h b$, the factor the source text writes after each waste
formula. The source text's MB and GB are decimal ($10^6$, $10^9$ bytes), except for the one
figure explained in ``ModelShape.block_bytes``.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from numbers import Real
from typing import NamedTuple

from minipaged.python_numbers import MAX_COUNT, python_number, take_python_numbers


def _check_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` as an int >= ``minimum`` (1: positive, 0: non-negative) and at most
    ``maximum`` (None: no bound), or raise; ``np.int64(16)`` is 16
    (``minipaged.python_numbers``)."""
    value = python_number(value)
    # bool is a subclass of int, but True as a block size is a bug, not a 1.
    if type(value) is not int or value < minimum:
        rule = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise ValueError(f"{name} must be {rule}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{name} must be at most {maximum:,} (the kernels index blocks, slots, heads and "
            f"dimensions with 32-bit integers), got {value:,}"
        )
    return value


KV_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
"""$b$, bytes per KV-cache element, for each KV-cache dtype name (§1: 2 for FP16/BF16, 1 for
FP8). ``"auto"`` keeps a shape's own $b$: the weights' dtype, as in vLLM."""


DTYPE_WIDTHS = (1, 2, 4, 8)
"""The values $b$ can take: a number is 1 (FP8), 2 (FP16/BF16), 4 or 8 bytes wide."""


class PoolStrides(NamedTuple):
    """Byte strides of one layer's key (or value) pool ``[num_blocks, N_KV, B, d_h]`` (§4)."""

    block: int  # Stride_block = N_KV * B * d_h * b
    head: int  # Stride_head = B * d_h * b
    token: int  # Stride_token = d_h * b


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The §1 parameters of a decoder-only transformer that fix its KV-cache size.

    Guaranteed after construction: every size is a positive integer up to ``MAX_COUNT``,
    $b$ is the width of a number (1, 2, 4 or 8 bytes), ``name`` is text, and $N_Q$ is a
    multiple of $N_{KV}$ ($N_{KV} = N_Q$ is multi-head attention, $N_{KV} < N_Q$
    grouped-query attention, where query head $q$ reads KV head $q \\,//\\, (N_Q / N_{KV})$).
    """

    num_layers: int  # N_L
    num_q_heads: int  # N_Q
    num_kv_heads: int  # N_KV
    head_dim: int  # d_h
    dtype_bytes: int  # b: 2 for FP16/BF16, 1 for FP8
    name: str = ""

    def __post_init__(self) -> None:
        take_python_numbers(self)  # np.int64(32) is 32
        for field in ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "dtype_bytes"):
            _check_int(field, getattr(self, field), maximum=MAX_COUNT)
        if self.dtype_bytes not in DTYPE_WIDTHS:
            raise ValueError(
                f"dtype_bytes (b) must be one of {', '.join(map(str, DTYPE_WIDTHS))}, the bytes "
                f"of an FP8, 16-bit, 32-bit or 64-bit number, got {self.dtype_bytes}"
            )
        if not isinstance(self.name, str):
            raise TypeError(
                f"name must be text naming the model (such as 'Llama-3-8B'), got {self.name!r}"
            )
        if self.num_q_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_q_heads (N_Q={self.num_q_heads}) must be a multiple of num_kv_heads "
                f"(N_KV={self.num_kv_heads}) so each KV head serves the same number of query "
                "heads; use N_KV = N_Q for multi-head attention"
            )

    @property
    def kv_bytes_per_token(self) -> int:
        """$2 N_L N_{KV} d_h b$: one token's keys and values in every layer (§1, §2)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def kv_bytes(self, num_tokens: Real) -> Real:
        """$M_{KV}(L) = 2 N_L N_{KV} d_h L b$ bytes for $L$ = ``num_tokens`` (§1).

        A fractional ``num_tokens`` (an expected waste such as 7.5 tokens) gives expected bytes.
        """
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, Real) or num_tokens < 0:
            raise ValueError(f"num_tokens must be a non-negative number, got {num_tokens!r}")
        return num_tokens * self.kv_bytes_per_token

    def with_kv_dtype(self, kv_cache_dtype: str) -> ModelShape:
        """This shape with the KV cache stored as ``kv_cache_dtype`` (a key of
        ``KV_DTYPE_BYTES``, or ``"auto"``: unchanged). Every byte count scales with $b$, so
        an FP8 cache ($b = 1$) fits twice the blocks of a BF16 one in the same bytes."""
        if kv_cache_dtype == "auto":
            return self
        if kv_cache_dtype not in KV_DTYPE_BYTES:
            raise ValueError(
                f"kv_cache_dtype must be 'auto' or one of {list(KV_DTYPE_BYTES)}, "
                f"got {kv_cache_dtype!r}"
            )
        return replace(self, dtype_bytes=KV_DTYPE_BYTES[kv_cache_dtype])

    def block_bytes_per_layer(self, block_size: int) -> int:
        """$2 N_{KV} d_h B b$: one physical block's keys and values in one layer (§3).

        At $B = 16$, $N_{KV} = 8$, $d_h = 128$, $b = 2$ this is 65,536 bytes (64 KiB, the
        source text's "64 KB"); half of it is the key block and half the value block.
        """
        block_size = _check_int("block_size", block_size)
        return 2 * self.num_kv_heads * self.head_dim * block_size * self.dtype_bytes

    def block_bytes(self, block_size: int) -> int:
        """BlockSizeBytes $= 2 N_L N_{KV} d_h B b$: one physical block in all $N_L$ layers (§3).

        The source text's 80-layer example, "80 × 64 KB = 5.12 MB", is 80 × 65,536 =
        5,242,880 bytes. That is 5.24 MB in decimal units or 5.0 MiB in binary ones; the text's
        5.12 comes from 5,120 KiB divided by 1,000, a mixed "megabyte" of 1,000 × 1,024 =
        1,024,000 bytes (the unit of the "1.44 MB" floppy disk).
        """
        return self.num_layers * self.block_bytes_per_layer(block_size)

    def num_blocks_for(self, capacity_bytes: int, block_size: int) -> int:
        """$\\mathcal{P}_{\\max}$: how many whole physical blocks fit in ``capacity_bytes``."""
        capacity_bytes = _check_int("capacity_bytes", capacity_bytes, minimum=0)
        return capacity_bytes // self.block_bytes(block_size)

    def kv_pool_strides(self, block_size: int) -> PoolStrides:
        """The §4 strides, in bytes, of a layer's pool laid out ``[num_blocks, N_KV, B, d_h]``.

        Keys and values live in two such pools, so Stride_block is half of
        ``block_bytes_per_layer``.
        """
        block_size = _check_int("block_size", block_size)
        token = self.head_dim * self.dtype_bytes
        head = block_size * token
        return PoolStrides(block=self.num_kv_heads * head, head=head, token=token)

    def kv_address(
        self, block_table: Sequence[int], t: int, head: int, block_size: int, pool_ptr: int = 0
    ) -> int:
        """The byte address of token $t$'s key (or value) vector for KV head $h$ = ``head`` in
        one layer's pool (§4); with ``pool_ptr = 0``, its byte offset from the pool's start:

        $$\\begin{aligned} \\text{Addr}_K(t) = {} & \\text{PoolPtr}
        + \\mathcal{T}[\\lfloor t/B \\rfloor] \\cdot \\text{Stride}_{block} \\\\
        & + (t \\bmod B) \\cdot \\text{Stride}_{token} + h \\cdot \\text{Stride}_{head}
        \\end{aligned}$$

        §3's worked example "BasePtr + 93 · BlockSizeBytes + 6 · TokenBytes" is this formula
        for one head ($h = 0$) of one layer's key pool: there "BlockSizeBytes" means that
        pool's block stride, not §3's all-layer BlockSizeBytes.
        """
        head = _check_int("head", head, minimum=0)
        if head >= self.num_kv_heads:
            raise ValueError(
                f"head must be a KV head index in 0..{self.num_kv_heads - 1}, got {head}; "
                f"query head q reads KV head q // {self.num_q_heads // self.num_kv_heads}"
            )
        pool_ptr = _check_int("pool_ptr", pool_ptr, minimum=0)
        stride = self.kv_pool_strides(block_size)
        p, o = _physical_block(block_table, t, block_size), block_offset(t, block_size)
        return pool_ptr + p * stride.block + o * stride.token + head * stride.head


PRESETS: dict[str, ModelShape] = {
    "llama-3-8b": ModelShape(32, 32, 8, 128, 2, name="Llama-3-8B"),
    "llama-3-70b": ModelShape(80, 64, 8, 128, 2, name="Llama-3-70B"),
    # As the source text states it (§1): N_KV = 64, "dense MHA". The released Llama-2-70B uses
    # grouped-query attention with 8 KV heads (num_key_value_heads = 8), so its real KV cache
    # is 327,680 B/token, the same as Llama-3-70B's (and its context window is 4,096 tokens, not
    # 8,192). This preset is a hypothetical MHA variant that reproduces the text's numbers.
    "llama-2-70b": ModelShape(80, 64, 64, 128, 2, name="Llama-2-70B (as stated: dense MHA)"),
}


def memory_amount(num_bytes: int) -> str:
    """``num_bytes`` as the project words an amount of memory, everywhere a person reads one
    (refusals, ``KVCache.describe``, the TUI's gauges, a trace's load budget): in the largest
    binary unit (GiB, MiB, KiB) that keeps it at 1 or more, to one decimal ("16.0 GiB"), so two
    amounts about the same memory can be compared at a glance. Binary, because the memory is:
    pages, Linux's free-memory figure (in KiB), and the blocks of the models the docs use (8 KiB
    for the tiny model's, 2 MiB for Llama-3-8B's at $B = 16$). The source text's decimal GB
    appear where the docs reproduce its figures (``ModelShape.block_bytes``)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.1f} {unit}"
    return f"{num_bytes:,} B"


def free_memory() -> int | None:
    """Bytes of host memory a new allocation can have now, or None where the system does not
    say. Linux's MemAvailable counts the file cache the kernel would give back; the free pages
    alone (``SC_AVPHYS_PAGES``, the fallback) do not, and on a machine whose cache has filled
    its memory they refused pools that fit."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    if "SC_AVPHYS_PAGES" not in os.sysconf_names:
        return None
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(need: int, free: int | None, pools: str, fix: str, where: str) -> None:
    """Refuse pools of ``need`` bytes where ``free`` bytes are free (None: unknown, never
    refuse), before any is allocated: torch would fail mid-allocation with its own
    RuntimeError, or the OS would end the process. ``pools`` says what the bytes are made of,
    ``where`` which memory holds them (``" on cuda:0"``), ``fix`` which settings lower them."""
    if free is not None and need > free:
        raise ValueError(
            f"the KV cache would take {memory_amount(need)} ({need:,} bytes: {pools}) but "
            f"{memory_amount(free)} are free{where}; {fix}"
        )


def logical_block(t: int, block_size: int) -> int:
    """$j = \\lfloor t/B \\rfloor$: the logical block that holds token position $t$ (§3)."""
    t = _check_int("t", t, minimum=0)
    block_size = _check_int("block_size", block_size)
    return t // block_size


def block_offset(t: int, block_size: int) -> int:
    """$o = t \\bmod B$: token $t$'s offset inside its block, in $[0, B)$ (§3)."""
    t = _check_int("t", t, minimum=0)
    block_size = _check_int("block_size", block_size)
    return t % block_size


def num_logical_blocks(num_tokens: int, block_size: int) -> int:
    """$M = \\lceil L/B \\rceil$: blocks a sequence of $L$ = ``num_tokens`` tokens needs (§3)."""
    num_tokens = _check_int("num_tokens", num_tokens, minimum=0)
    block_size = _check_int("block_size", block_size)
    return -(-num_tokens // block_size)  # ceiling division in integers: no float rounding


def _physical_block(block_table: Sequence[int], t: int, block_size: int) -> int:
    """$\\mathcal{T}_r[\\lfloor t/B \\rfloor]$, after checking that the table reaches token $t$."""
    j = logical_block(t, block_size)
    if j >= len(block_table):
        raise ValueError(
            f"token position t={t} is outside the block table: {len(block_table)} blocks of "
            f"B={block_size} hold positions 0..{len(block_table) * block_size - 1}; "
            "allocate a block for it first"
        )
    return _check_int(f"block_table[{j}]", block_table[j], minimum=0)


def slot(block_table: Sequence[int], t: int, block_size: int) -> int:
    """$\\mathcal{T}_r[\\lfloor t/B \\rfloor] \\cdot B + (t \\bmod B)$ (§3): token $t$'s row in
    the pool flattened to ``[num_blocks * B, ...]``; ``slot // B`` and ``slot % B`` give back
    the physical block and the offset."""
    t, block_size = _check_int("t", t, minimum=0), _check_int("block_size", block_size)
    return _physical_block(block_table, t, block_size) * block_size + block_offset(t, block_size)


def static_internal_waste(length: int, max_length: int) -> int:
    """$\\mathcal{W}_{int,i} = L_{\\max} - L_i$ tokens reserved but never written (§2)."""
    max_length = _check_int("max_length", max_length)
    length = _check_int("length", length, minimum=0)
    if length > max_length:
        raise ValueError(f"length {length} exceeds max_length {max_length}: raise max_length")
    return max_length - length


def expected_static_internal_waste(
    lengths: Mapping[int, Real] | Sequence[int], max_length: int, num_requests: int = 1
) -> Real:
    """$\\mathbb{E}[\\mathcal{W}_{int}] = N \\sum_L (L_{\\max} - L)\\, p(L)$ tokens (§2).

    The discrete form of the source text's integral. ``lengths`` is either a mapping
    length → probability $p(L)$ (summing to 1) or samples, each weighted $1/n$ (the result is
    then an exact ``Fraction``). $N$ = ``num_requests``.
    """
    num_requests = _check_int("num_requests", num_requests)
    if isinstance(lengths, Mapping):
        dist = dict(lengths)
    elif len(lengths) == 0:
        raise ValueError("lengths is empty: give at least one sample length")
    else:
        dist = {L: Fraction(n, len(lengths)) for L, n in Counter(lengths).items()}
    for length, p in dist.items():
        if not isinstance(p, Real) or p < 0:
            raise ValueError(f"probability of length {length} must be >= 0, got {p!r}")
    total = sum(dist.values())
    if not math.isclose(total, 1, abs_tol=1e-9):
        raise ValueError(f"probabilities must sum to 1, got {total}")
    return num_requests * sum(static_internal_waste(L, max_length) * p for L, p in dist.items())


def reservation_waste(t: int, delta: int) -> int:
    """$\\mathcal{W}_{res}(t) = \\lceil t/\\Delta L \\rceil \\cdot \\Delta L - t$ tokens (§2):
    reserved ahead of step $t \\ge 1$ in chunks of $\\Delta L$ = ``delta``; in $[0, \\Delta L)$."""
    t = _check_int("t", t)
    delta = _check_int("delta", delta)
    return -(-t // delta) * delta - t


def external_fragmentation_stalls(free_segments: Sequence[int], request: int) -> bool:
    """True iff $\\max_j c(m_j) < C_{req} \\le \\sum_j c(m_j)$ (§2): enough memory is free in
    total, but no single contiguous segment can hold the request. Any one unit for all sizes."""
    request = _check_int("request", request)
    for i, capacity in enumerate(free_segments):
        _check_int(f"free_segments[{i}]", capacity)
    largest = max(free_segments, default=0)
    return largest < request <= sum(free_segments)


def paged_internal_waste(num_tokens: int, block_size: int) -> int:
    """$\\lceil L/B \\rceil \\cdot B - L$ tokens (§3): the unwritten slots of the last block,
    the only block that can have any. Always in $[0, B-1]$ and equal to $(-L) \\bmod B$."""
    num_tokens = _check_int("num_tokens", num_tokens, minimum=0)
    block_size = _check_int("block_size", block_size)
    return num_logical_blocks(num_tokens, block_size) * block_size - num_tokens


def paged_waste_bound(block_size: int) -> int:
    """$B - 1$ tokens: the most a sequence can waste under paging (§3)."""
    block_size = _check_int("block_size", block_size)
    return block_size - 1


def expected_paged_waste(block_size: int) -> Fraction:
    """$\\mathbb{E}[\\mathcal{W}_{paged\\_int}] = (B-1)/2$ tokens (§3), when $L \\bmod B$ is
    uniform on $\\{0, \\dots, B-1\\}$: 7.5 tokens at $B = 16$."""
    return Fraction(paged_waste_bound(block_size), 2)


def paged_waste_fraction(num_tokens: int, block_size: int) -> Fraction:
    """$\\mathcal{F}_{waste} = \\frac{(B-1)/2}{L}$ (§3): the expected waste as a share of $L$
    (1.5% at $L = 500$, $B = 16$). The waste of one given $L$ is ``paged_internal_waste``."""
    num_tokens = _check_int("num_tokens", num_tokens)
    return expected_paged_waste(block_size) / num_tokens
