"""The KV cache tensors: the physical blocks the block manager hands out by id.

Source text §3: a physical block $p$ holds $B$ token vectors of keys and values, for every KV
head, in every layer. Each layer keeps a key pool and a value pool shaped
``[num_blocks, num_kv_heads, B, head_dim]`` (the §4 layout), so token $t$ of a sequence with
block table $\\mathcal{T}_r$ sits at ``pool[T_r[t // B], :, t % B, :]``.

This module owns tensors and executes the operations the block manager decides on: writing a
step's keys and values at their slots (``write_kv``), copy-on-write copies (§5) and swapping
to and from the host pool (§6). It never decides which block to use, and it imports no kernel:
a ``KVCache`` built with ``kernels`` (``minipaged.backend.kernels_for`` picks them) runs its
copies with those kernels' ``copy_blocks`` and ``swap_blocks`` instead of torch indexing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from minipaged import fp8, huge_pages
from minipaged.attention_call import check_kv_scales
from minipaged.contract import HALF_POOL_DTYPES, POOL_DTYPES, check_block_pairs, check_write
from minipaged.device import check_device, check_pools_fit_on
from minipaged.memory import ModelShape, memory_amount
from minipaged.python_numbers import python_numbers


def write_kv(
    key_pool: Tensor,
    value_pool: Tensor,
    key: Tensor,
    value: Tensor,
    slot_mapping: Tensor,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
) -> None:
    """Write token $i$'s key and value into its slot (vLLM calls this ``reshape_and_cache``).

    ``key`` and ``value`` are ``[N, num_kv_heads, head_dim]``; ``slot_mapping`` is ``[N]`` with
    slot $= \\mathcal{T}_r[j] \\cdot B + o$. Token $i$ lands in block ``slot // B`` at offset
    ``slot % B``. A negative slot means "do not write this token" (for example a token whose
    key and value are already cached) and leaves the pools untouched.

    Raises ``ValueError`` before writing anything if a slot is past the pool's end or two tokens
    share a slot (the result would depend on write order).

    FP8 pools: float keys and values are quantized on the way in (``fp8.quantize``) with the
    layer's per-KV-head scales ``k_scale`` and ``v_scale`` ``[num_kv_heads]`` (1 when None).
    """
    key, value = quantize_kv(key_pool.dtype, key, value, k_scale, v_scale)
    slots = check_write(key_pool, value_pool, key, value, slot_mapping)
    if slots.numel() == 0:
        return
    if slots.numel() < slot_mapping.numel():  # some tokens are skipped: write the others
        keep = slot_mapping >= 0
        key, value = key[keep], value[keep]
    block_size = key_pool.shape[2]
    block = slots // block_size
    offset = slots % block_size
    # Indices on dims 0 and 2 with a slice between them: the indexed view is [n, num_kv_heads,
    # head_dim], the same shape as the kept tokens.
    key_pool[block, :, offset] = key
    value_pool[block, :, offset] = value


def quantize_kv(
    pool_dtype: torch.dtype,
    key: Tensor,
    value: Tensor,
    k_scale: Tensor | None,
    v_scale: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """``key`` and ``value`` ``[N, num_kv_heads, head_dim]`` as the pools store them: quantized
    with their per-head scales when the pools are FP8 and the tokens are not, rounded to the
    pools' dtype when it is another float (a float16 cache under a float32 model), else
    unchanged. The one place a write quantizes, for the reference and the kernels alike."""
    if isinstance(key, Tensor) and key.dim() == 3:  # else check_write refuses it, by name
        check_kv_scales(key.dtype, pool_dtype, key.shape[1], k_scale, v_scale, key.device)
    if key.dtype == pool_dtype:
        return key, value
    narrower = key.dtype == torch.float32 and pool_dtype in HALF_POOL_DTYPES
    if not (narrower or fp8.is_fp8(pool_dtype)):  # check_write refuses the pair
        return key, value
    ones = torch.ones(key.shape[1], device=key.device)
    k_scale = ones if k_scale is None else k_scale
    v_scale = ones if v_scale is None else v_scale
    if narrower:  # k / s_k, read back as s_k * k-hat (fp8.dequantize), as FP8 is
        return (key / k_scale[:, None]).to(pool_dtype), (value / v_scale[:, None]).to(pool_dtype)
    # check_kv_scales checked the scales above: no second read (a GPU sync) per write
    key = fp8.quantize_unchecked(key, k_scale[:, None], pool_dtype)  # per KV head, [N_KV, 1]
    return key, fp8.quantize_unchecked(value, v_scale[:, None], pool_dtype)


class CacheKernels(Protocol):
    """What ``KVCache`` needs from a kernel module (``cuda_kernels`` or its CPU twin
    ``cuda_kernels.cpu``) to run its copies as kernels: vLLM's ``cache_ops``."""

    def copy_blocks(
        self, key_pools: list[Tensor], value_pools: list[Tensor], pairs: Sequence[tuple[int, int]]
    ) -> None: ...

    def swap_blocks(
        self, src_pool: Tensor, dst_pool: Tensor, mapping: Sequence[tuple[int, int]]
    ) -> None: ...


def check_kernels(kernels: object) -> None:
    """``kernels`` is None (torch indexing) or has the ``CacheKernels`` methods, else a
    ``TypeError`` now: ``KVCache(kernels=5)`` would otherwise fail at the first copy-on-write,
    in the middle of a step."""
    missing = [
        name for name in ("copy_blocks", "swap_blocks") if not callable(getattr(kernels, name, 0))
    ]
    if kernels is not None and missing:
        raise TypeError(
            f"kernels must be None (copies by torch indexing) or a kernel module with "
            f"copy_blocks and swap_blocks (cuda_kernels, cuda_kernels.cpu; "
            f"minipaged.backend.kernels_for picks one), got {type(kernels).__name__} "
            f"{kernels!r:.60}, which lacks {' and '.join(missing)}"
        )


VIEW_BYTES_PER_LAYER = 4096
"""Host bytes a layer costs beside its pools: the four views ``key[layer]``, ``value[layer]``,
``host_key[layer]``, ``host_value[layer]`` take about 600 B each as Python objects (measured),
rounded up. A ``meta`` cache of $10^9$ layers holds no values but would still take 2.4 TB."""


def cache_block_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype
) -> int:
    """BlockSizeBytes $= 2 N_L N_{KV} d_h B b$ (§3) of pools of ``dtype`` ($b$ its element
    size): ``ModelShape.block_bytes``, the formula's one home. $N_Q$ does not count, since the
    cache holds keys and values only."""
    shape = ModelShape(num_layers, num_kv_heads, num_kv_heads, head_dim, dtype.itemsize)
    return shape.block_bytes(block_size)


def check_pools_fit(sizes: dict[str, int], dtype: torch.dtype, device: torch.device) -> None:
    """Refuse pools of checked ``sizes`` that the memory free on ``device`` and on the host
    cannot hold (``device.check_pools_fit_on``), naming their bytes, before torch tries to
    allocate them. The host also holds every layer's views (``VIEW_BYTES_PER_LAYER``)."""
    shape = (sizes["num_layers"], sizes["num_kv_heads"], sizes["head_dim"], sizes["block_size"])
    block_bytes = cache_block_bytes(*shape, dtype)
    num_blocks, num_cpu_blocks, num_layers = (
        sizes[name] for name in ("num_blocks", "num_cpu_blocks", "num_layers")
    )
    host_bytes = num_cpu_blocks * block_bytes + num_layers * VIEW_BYTES_PER_LAYER
    check_pools_fit_on(
        device,
        (num_blocks * block_bytes, f"{num_blocks:,} device blocks of {block_bytes:,} B"),
        (
            host_bytes,
            f"{num_cpu_blocks:,} host blocks of {block_bytes:,} B and {num_layers:,} layers' views",
        ),
        "lower num_blocks, num_cpu_blocks, num_layers, block_size or head_dim",
    )


def pool_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """A pool of zeros: on 2 MiB pages on a CPU (``huge_pages.zeros_on_huge_pages``), by
    ``torch.zeros`` on any other device."""
    if device.type == "cpu":
        return huge_pages.zeros_on_huge_pages(shape, dtype)
    return torch.zeros(shape, dtype=dtype, device=device)


class KVCache:
    """Key and value pools for every layer, on the compute device, plus a host pool for swapping.

    ``key[layer]`` and ``value[layer]`` are ``[num_blocks, num_kv_heads, B, head_dim]`` tensors on
    ``device``; ``host_key[layer]`` and ``host_value[layer]`` are ``[num_cpu_blocks, ...]`` on
    the CPU (in pinned memory when ``device`` is CUDA, so copies to and from it can run
    asynchronously). Block id $p$ means the same block in every layer: the block manager
    allocates one id and this class moves that block in all $N_L$ layers at once.

    Invariant: ``copy_blocks``, ``swap_out`` and ``swap_in`` check every id before
    moving anything, so a rejected call leaves all pools unchanged.

    FP8 (``dtype`` ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``, source text §1's $b = 1$):
    the pools, host pools included, hold FP8 bytes, and ``k_scale[layer]`` and
    ``v_scale[layer]`` (``[num_kv_heads]`` float32, 1 until ``set_scales``) say what they
    mean: value $= s \\cdot \\hat{x}$ (``minipaged.fp8``). The scales are per layer and head,
    not per block, so copies and swaps move bytes only and a block means the same values
    wherever it lies.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        num_kv_heads: int,
        block_size: int,
        head_dim: int,
        num_cpu_blocks: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        kernels: CacheKernels | None = None,
    ) -> None:
        sizes = python_numbers(  # np.int64(16) is 16
            num_layers=num_layers,
            num_blocks=num_blocks,
            num_kv_heads=num_kv_heads,
            block_size=block_size,
            head_dim=head_dim,
            num_cpu_blocks=num_cpu_blocks,
        )
        for name, size in sizes.items():
            host = name == "num_cpu_blocks"  # 0 host blocks: no swapping
            if type(size) is not int or size < (0 if host else 1):
                what = "a non-negative integer" if host else "a positive integer"
                why = " (0 means no host pool: no swapping)" if host else ""
                raise ValueError(f"{name} must be {what}, got {size!r}{why}")
        if not isinstance(dtype, torch.dtype):
            raise TypeError(
                f"dtype must be a torch.dtype (torch.float32, torch.float8_e4m3fn, ...), got "
                f"{dtype!r}"
            )
        if dtype not in POOL_DTYPES:  # what the attention reads: no float64, no integers
            raise ValueError(
                f"dtype must be a dtype the attention reads pools in, one of "
                f"{[str(d).removeprefix('torch.') for d in POOL_DTYPES]}, got {dtype}"
            )
        # "gpu", or CUDA on a machine without it, is named; meta holds shapes only, for an
        # engine that checks requests without weights (tui.scenarios.Scenario.check)
        if str(device) != "meta":
            device = check_device(device)
        check_kernels(kernels)
        check_pools_fit(sizes, dtype, torch.device(device))
        self.num_layers = num_layers = sizes["num_layers"]
        self.num_blocks = num_blocks = sizes["num_blocks"]
        self.num_kv_heads = num_kv_heads = sizes["num_kv_heads"]
        self.block_size = block_size = sizes["block_size"]
        self.head_dim = head_dim = sizes["head_dim"]
        self.num_cpu_blocks = num_cpu_blocks = sizes["num_cpu_blocks"]
        self.dtype = dtype
        self.device = torch.device(device)
        self.kernels = kernels  # None: copies and swaps by torch indexing, the reference

        block_shape = (num_kv_heads, block_size, head_dim)
        # One tensor per kind holds every layer, so a copy or swap moves block p in all layers
        # with one indexing operation; key[layer] and value[layer] are views into it. On a CPU
        # they lie on 2 MiB pages, as a GPU maps its memory: a kernel that jumps from block to
        # block through a table then finds each block's page without a page-table walk
        # (minipaged.huge_pages says why)
        shape = (num_layers, num_blocks, *block_shape)  # [N_L, num_blocks, N_KV, B, head_dim]
        self._key = pool_zeros(shape, dtype, self.device)
        self._value = pool_zeros(shape, dtype, self.device)
        pinned = self.device.type == "cuda"
        self._host_key = torch.zeros(
            num_layers, num_cpu_blocks, *block_shape, dtype=dtype, pin_memory=pinned
        )  # [N_L, num_cpu_blocks, num_kv_heads, B, head_dim]
        self._host_value = torch.zeros(
            num_layers, num_cpu_blocks, *block_shape, dtype=dtype, pin_memory=pinned
        )
        # Scales of FP8 pools, [N_L, num_kv_heads]: 1 (vLLM's default) until set_scales.
        self.k_scale = torch.ones(num_layers, num_kv_heads, device=device)
        self.v_scale = torch.ones(num_layers, num_kv_heads, device=device)
        self.key: list[Tensor] = list(self._key.unbind(0))
        self.value: list[Tensor] = list(self._value.unbind(0))
        self.host_key: list[Tensor] = list(self._host_key.unbind(0))
        self.host_value: list[Tensor] = list(self._host_value.unbind(0))

    @property
    def bytes_per_block(self) -> int:
        """Bytes of one physical block across all layers, keys and values: the source text's
        $\\text{BlockSizeBytes} = 2 \\cdot N_L \\cdot N_{KV} \\cdot d_h \\cdot B \\cdot b$ (§3)."""
        shape = (self.num_layers, self.num_kv_heads, self.head_dim, self.block_size)
        return cache_block_bytes(*shape, self.dtype)

    def summary(self) -> dict:
        """The element type as ``LLM(kv_cache_dtype=...)`` names it, $b$, and the bytes of one
        block: what a trace's header records and the TUI's memory gauge shows."""
        b = self._key.element_size()
        name = fp8.kv_cache_dtype_name(self.dtype)
        return {"dtype": name, "b": b, "bytes_per_block": self.bytes_per_block}

    def scales(self, layer: int, compute_dtype: torch.dtype) -> dict[str, Tensor]:
        """The keyword arguments that read and write ``layer``'s pools from ``compute_dtype``:
        its ``k_scale`` and ``v_scale`` when the pools are stored in another dtype (FP8), none
        when they hold the model's own dtype."""
        if self.dtype == compute_dtype:
            return {}
        return {"k_scale": self.k_scale[layer], "v_scale": self.v_scale[layer]}

    def describe(self) -> str:
        """The pools in one line, for a memory table: dtype, $b$, blocks and bytes."""
        b = self._key.element_size()
        name = str(self.dtype).removeprefix("torch.")
        total = self.num_blocks * self.bytes_per_block
        return (
            f"{name} (b = {b}): {self.num_blocks:,} blocks × {self.bytes_per_block:,} B "
            f"= {memory_amount(total)}, host {self.num_cpu_blocks:,} blocks"
        )

    def set_scales(self, k_scale: Tensor, v_scale: Tensor) -> None:
        """Set the FP8 scales ``[num_layers, num_kv_heads]`` (from ``minipaged.kv_calibration``)
        before anything is written: bytes written under other scales would change meaning.

        Refused, before any scale changes: pools that are not FP8 (a float pool holds the keys
        and values themselves and is read without scales, so a scale would be ignored), and
        pools holding a written byte. Pools start as zeros, and a zero byte means 0 under
        every scale, so only a nonzero byte counts as written (``_holds_written_bytes``)."""
        if not fp8.is_fp8(self.dtype):
            raise ValueError(
                f"set_scales sets the scales of FP8 pools, but this cache holds {self.dtype}, "
                "which stores the keys and values themselves: the scales would be ignored; "
                "build the cache with an FP8 dtype (KVCache(dtype=torch.float8_e4m3fn), "
                "LLM(kv_cache_dtype='fp8_e4m3')) or leave the scales at 1"
            )
        expected = (self.num_layers, self.num_kv_heads)
        for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
            fp8.check_scales(scale, name)  # positive and finite: a tensor of them
            if not isinstance(scale, Tensor) or tuple(scale.shape) != expected:
                raise ValueError(
                    f"{name} must be positive with shape [num_layers, num_kv_heads] = "
                    f"{list(expected)}, got {type(scale).__name__} of shape "
                    f"{list(getattr(scale, 'shape', []))}"
                )
        if self._holds_written_bytes():
            raise ValueError(
                "set_scales was called after keys and values were written to this cache: "
                "the bytes already stored were quantized with the scales in force then and "
                "would change meaning; set the scales before the first write (LLM sets them "
                "at load, from minipaged.kv_calibration), or build a new KVCache for the new "
                "scales"
            )
        self.k_scale.copy_(k_scale)
        self.v_scale.copy_(v_scale)

    def _holds_written_bytes(self) -> bool:
        """Whether a pool, device or host, holds a nonzero byte (one pass, no copy)."""
        pools = (self._key, self._value, self._host_key, self._host_value)
        return any(bool(p.view(torch.uint8).any()) for p in pools if p.numel() and not p.is_meta)

    def copy_blocks(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Copy-on-write (§5): for each ``(src, dst)``, device block ``dst`` becomes a copy of
        device block ``src`` in every layer.

        The whole block is copied, not just its first $o$ slots: the slots past $o$ hold no
        token yet, and attention never reads a slot at or past a sequence's length. All copies
        read their sources before any is written, so no destination may also be a source, and
        destinations must be distinct.
        """
        if not pairs:
            return
        sizes = (self.num_blocks, self.num_blocks)
        check_block_pairs(pairs, *sizes, ("device", "device"), copy_on_write=True)
        if self.kernels is not None:
            self.kernels.copy_blocks(self.key, self.value, pairs)
            return
        src, dst = self._indices(pairs, self.device)
        self._key[:, dst] = self._key[:, src]
        self._value[:, dst] = self._value[:, src]

    def swap_out(self, mapping: Sequence[tuple[int, int]]) -> None:
        """Swapping (§6): for each ``(device_block, host_block)``, copy the device block into the
        host block in every layer. The device block is left as it was; the block manager frees
        it."""
        if not mapping:
            return
        check_block_pairs(mapping, self.num_blocks, self.num_cpu_blocks, ("device", "host"))
        if self.kernels is not None:
            self._swap_with_kernels(self.key + self.value, self.host_key + self.host_value, mapping)
            return
        src, dst = self._indices(mapping, self.device)
        host_dst = dst.cpu()
        self._host_key[:, host_dst] = self._key[:, src].cpu()
        self._host_value[:, host_dst] = self._value[:, src].cpu()

    def swap_in(self, mapping: Sequence[tuple[int, int]]) -> None:
        """Swapping back (§6): for each ``(host_block, device_block)``, copy the host block into
        the device block in every layer, restoring its bytes exactly."""
        if not mapping:
            return
        check_block_pairs(mapping, self.num_cpu_blocks, self.num_blocks, ("host", "device"))
        if self.kernels is not None:
            self._swap_with_kernels(self.host_key + self.host_value, self.key + self.value, mapping)
            return
        host_src, dst = self._indices(mapping, "cpu")
        self._key[:, dst.to(self.device)] = self._host_key[:, host_src].to(self.device)
        self._value[:, dst.to(self.device)] = self._host_value[:, host_src].to(self.device)

    @staticmethod
    def _indices(pairs: Sequence[tuple[int, int]], device) -> tuple[Tensor, Tensor]:
        """The sources and destinations of checked ``pairs`` as index tensors on ``device``."""
        src, dst = torch.tensor(pairs, dtype=torch.long, device=device).unbind(1)
        return src, dst

    def _swap_with_kernels(
        self, sources: list[Tensor], destinations: list[Tensor], mapping: Sequence[tuple[int, int]]
    ) -> None:
        for src_pool, dst_pool in zip(sources, destinations, strict=True):
            self.kernels.swap_blocks(src_pool, dst_pool, mapping)
