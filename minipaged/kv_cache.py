"""The KV cache tensors: the physical blocks the block manager hands out by id.

Source text §3: a physical block $p$ holds $B$ token vectors of keys and values, for every KV
head, in every layer. Each layer keeps a key pool and a value pool shaped
``[num_blocks, num_kv_heads, B, head_dim]`` (the §4 layout), so token $t$ of a sequence with
block table $\\mathcal{T}_r$ sits at ``pool[T_r[t // B], :, t % B, :]``.

This module owns tensors and executes the operations the block manager decides on: writing a
step's keys and values at their slots (``write_kv``), copy-on-write copies (§5) and swapping
to and from the host pool (§6). It never decides which block to use.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def check_write(
    key_pool: Tensor, value_pool: Tensor, key: Tensor, value: Tensor, slot_mapping: Tensor
) -> Tensor:
    """The checks every cache write makes (``write_kv`` here, ``reshape_and_cache`` in
    ``cuda_kernels``) before touching the pools: matching shapes and dtypes, slots inside the
    pool, no slot written twice. Returns the slots to write (the non-negative ones), int64."""
    num_blocks, num_kv_heads, block_size, head_dim = key_pool.shape
    if value_pool.shape != key_pool.shape:
        raise ValueError(
            f"key_pool {tuple(key_pool.shape)} and value_pool {tuple(value_pool.shape)} must "
            "have the same shape [num_blocks, num_kv_heads, B, head_dim]"
        )
    expected = (slot_mapping.shape[0], num_kv_heads, head_dim)
    for name, tensor in (("key", key), ("value", value)):
        if tuple(tensor.shape) != expected:
            raise ValueError(
                f"{name} must be [N, num_kv_heads, head_dim] = {expected} to match slot_mapping "
                f"and the pools, got {tuple(tensor.shape)}"
            )
        if tensor.dtype != key_pool.dtype:
            raise ValueError(
                f"{name} has dtype {tensor.dtype} but the pools hold {key_pool.dtype}: "
                f"cast it with .to({key_pool.dtype}) first"
            )
    slots = slot_mapping[slot_mapping >= 0].long()  # [n] with n <= N
    num_slots = num_blocks * block_size
    if slots.numel() and int(slots.max()) >= num_slots:
        raise ValueError(
            f"slot {int(slots.max())} is past the end of the pool: {num_blocks} blocks of "
            f"B={block_size} hold slots 0..{num_slots - 1}"
        )
    if torch.unique(slots).numel() != slots.numel():
        raise ValueError(
            f"slot_mapping {slots.tolist()} writes two tokens into the same slot; "
            "each token needs its own slot"
        )
    return slots


def write_kv(
    key_pool: Tensor, value_pool: Tensor, key: Tensor, value: Tensor, slot_mapping: Tensor
) -> None:
    """Write token $i$'s key and value into its slot (vLLM calls this ``reshape_and_cache``).

    ``key`` and ``value`` are ``[N, num_kv_heads, head_dim]``; ``slot_mapping`` is ``[N]`` with
    slot $= \\mathcal{T}_r[j] \\cdot B + o$. Token $i$ lands in block ``slot // B`` at offset
    ``slot % B``. A negative slot means "do not write this token" (for example a token whose
    key and value are already cached) and leaves the pools untouched.

    Raises ``ValueError`` before writing anything if a slot is past the pool's end or two tokens
    share a slot (the result would depend on write order).
    """
    slots = check_write(key_pool, value_pool, key, value, slot_mapping)
    if slots.numel() == 0:
        return
    keep = slot_mapping >= 0
    block_size = key_pool.shape[2]
    block = slots // block_size
    offset = slots % block_size
    # Indices on dims 0 and 2 with a slice between them: the indexed view is [n, num_kv_heads,
    # head_dim], the same shape as the kept tokens.
    key_pool[block, :, offset] = key[keep]
    value_pool[block, :, offset] = value[keep]


def check_block_pairs(
    pairs: Sequence[tuple[int, int]],
    src_size: int,
    dst_size: int,
    pools: tuple[str, str] = ("source-pool", "destination-pool"),
    copy_on_write: bool = False,
) -> None:
    """The checks every block copy makes (``KVCache`` here, ``copy_blocks`` and
    ``swap_blocks`` in ``cuda_kernels``) before moving anything: each ``(src, dst)`` names a
    block of its pool (``pools`` names them in messages), no destination repeats, and for
    copy-on-write no block is both a source and a destination. Raises ``ValueError`` naming
    the first bad pair."""
    for src, dst in pairs:
        for role, block, pool, size in (
            ("source", src, pools[0], src_size),
            ("destination", dst, pools[1], dst_size),
        ):
            if not 0 <= block < size:
                valid = f"blocks 0..{size - 1}" if size else "no blocks (num_host_blocks=0)"
                raise ValueError(
                    f"{role} block {block} in pair ({src}, {dst}) is not a {pool} block: it "
                    f"is outside its pool of {size} blocks ({valid})"
                )
    destinations = [dst for _, dst in pairs]
    if len(set(destinations)) != len(destinations):
        raise ValueError(
            f"destination blocks {destinations} repeat; each destination must appear once"
        )
    if copy_on_write and {src for src, _ in pairs} & set(destinations):
        raise ValueError(
            f"copy_blocks pairs {list(pairs)} use a block as both source and destination; "
            "a copy-on-write destination is a freshly allocated block"
        )


class KVCache:
    """Key and value pools for every layer, on the compute device, plus a host pool for swapping.

    ``key[layer]`` and ``value[layer]`` are ``[num_blocks, num_kv_heads, B, head_dim]`` tensors on
    ``device``; ``host_key[layer]`` and ``host_value[layer]`` are ``[num_host_blocks, ...]`` on
    the CPU (in pinned memory when ``device`` is CUDA, so copies to and from it can run
    asynchronously). Block id $p$ means the same block in every layer: the block manager
    allocates one id and this class moves that block in all $N_L$ layers at once.

    Invariant: ``copy_blocks``, ``swap_out`` and ``swap_in`` check every id before
    moving anything, so a rejected call leaves all pools unchanged.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        num_kv_heads: int,
        block_size: int,
        head_dim: int,
        num_host_blocks: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        backend: str = "torch",
    ) -> None:
        sizes = {
            "num_layers": num_layers,
            "num_blocks": num_blocks,
            "num_kv_heads": num_kv_heads,
            "block_size": block_size,
            "head_dim": head_dim,
        }
        for name, size in sizes.items():
            if not isinstance(size, int) or size <= 0:
                raise ValueError(f"{name} must be a positive integer, got {size!r}")
        if not isinstance(num_host_blocks, int) or num_host_blocks < 0:
            raise ValueError(
                f"num_host_blocks must be a non-negative integer, got {num_host_blocks!r} "
                "(0 means no host pool: no swapping)"
            )
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.num_kv_heads = num_kv_heads
        self.block_size = block_size
        self.head_dim = head_dim
        self.num_host_blocks = num_host_blocks
        self.dtype = dtype
        self.device = torch.device(device)
        self.backend = backend  # "numba": copies and swaps run as cuda_kernels' kernels

        block_shape = (num_kv_heads, block_size, head_dim)
        # One tensor per kind holds every layer, so a copy or swap moves block p in all layers
        # with one indexing operation; key[layer] and value[layer] are views into it.
        self._key = torch.zeros(num_layers, num_blocks, *block_shape, dtype=dtype, device=device)
        self._value = torch.zeros_like(self._key)  # [N_L, num_blocks, num_kv_heads, B, head_dim]
        pinned = self.device.type == "cuda"
        self._host_key = torch.zeros(
            num_layers, num_host_blocks, *block_shape, dtype=dtype, pin_memory=pinned
        )  # [N_L, num_host_blocks, num_kv_heads, B, head_dim]
        self._host_value = torch.zeros(
            num_layers, num_host_blocks, *block_shape, dtype=dtype, pin_memory=pinned
        )
        self.key: list[Tensor] = list(self._key.unbind(0))
        self.value: list[Tensor] = list(self._value.unbind(0))
        self.host_key: list[Tensor] = list(self._host_key.unbind(0))
        self.host_value: list[Tensor] = list(self._host_value.unbind(0))

    @property
    def bytes_per_block(self) -> int:
        """Bytes of one physical block across all layers, keys and values: the source text's
        $\\text{BlockSizeBytes} = 2 \\cdot N_L \\cdot N_{KV} \\cdot d_h \\cdot B \\cdot b$ (§3)."""
        b = self._key.element_size()  # bytes per element
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.block_size * b

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
        if self.backend == "numba":
            import cuda_kernels

            cuda_kernels.copy_blocks(self.key, self.value, pairs)
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
        check_block_pairs(mapping, self.num_blocks, self.num_host_blocks, ("device", "host"))
        if self.backend == "numba":
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
        check_block_pairs(mapping, self.num_host_blocks, self.num_blocks, ("host", "device"))
        if self.backend == "numba":
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

    @staticmethod
    def _swap_with_kernels(
        sources: list[Tensor], destinations: list[Tensor], mapping: Sequence[tuple[int, int]]
    ) -> None:
        import cuda_kernels

        for src_pool, dst_pool in zip(sources, destinations, strict=True):
            cuda_kernels.swap_blocks(src_pool, dst_pool, mapping)
