"""§4's gather: a sequence's keys and values, read through its block table into token order.

The vectorized reference (``minipaged.attention``) gathers first and attends second; a kernel
never gathers, it reads each block where it lies. The gather is the reference's whole cost of
paging, so it is written to cost one copy of the blocks and no more:

- one ``index_select`` per KV head copies whole ``[B, d_h]`` blocks, which lie contiguous in
  the pools ``[num_blocks, num_kv_heads, B, head_dim]``;
- the copy lands in a ``Workspace`` kept from call to call, not in fresh memory;
- which blocks to copy and which positions are valid (the ``GatherIndex``) depend only on the
  tables and lengths, which every layer of an engine step shares: the workspace makes the
  index once and hands it out again while they stay the same.

Why the workspace: one layer of Llama-3-8B at batch 4 and 4,096 tokens gathers 134 MB. Memory
that large comes fresh from the operating system on every call, and the first write to each of
its pages faults. Measured on one core, filling fresh buffers took about 4 times as long as
filling reused ones (132 ms against 31 ms): the reference spent most of its time not copying
but waiting for pages.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import torch
from torch import Tensor

from minipaged.fp8 import dequantize_unchecked


class GatherIndex(NamedTuple):
    """Where a gather reads and which of its positions hold a token, for one batch of block
    tables (``gather_index``)."""

    blocks: Tensor  # [batch * max_blocks]: T_b[j] for each sequence b and logical block j
    valid: Tensor  # [batch, max_len] bool: position t < L_b
    unused: Tensor  # [number of positions t >= L_b]: b * max_len + t for each of them
    max_len: int  # the longest sequence rounded up to whole blocks


def gather_index(
    block_tables: Tensor, seq_lens: Tensor, block_size: int, num_blocks: int
) -> GatherIndex:
    """The ``GatherIndex`` of ``block_tables`` ``[batch, max_blocks]`` and ``seq_lens``
    ``[batch]`` over a pool of ``num_blocks`` blocks of ``block_size`` tokens."""
    longest = int(seq_lens.max()) if seq_lens.numel() else 0  # an empty batch reads nothing
    max_blocks = -(-longest // block_size)
    # Entries past a sequence's last block may hold NO_BLOCK or garbage: clamp them to some
    # real block so indexing works; the positions they supply are zeroed by the gather.
    blocks = block_tables[:, :max_blocks].clamp(0, num_blocks - 1).flatten()  # int32 or int64
    max_len = max_blocks * block_size
    positions = torch.arange(max_len, device=seq_lens.device)
    valid = positions[None, :] < seq_lens[:, None]  # [batch, max_len]
    unused = (~valid).flatten().nonzero().squeeze(1)  # b * max_len + t for every t >= L_b
    return GatherIndex(blocks, valid, unused, max_len)


class Workspace:
    """Scratch tensors that a gather reuses, one per ``name`` (``"keys"``, ``"values"``), and
    the last gather's index.

    ``take`` hands out a view of the named buffer, which grows to the largest request seen and
    is kept (like vLLM's preallocated workspaces) until the workspace is dropped. ``index``
    makes a ``GatherIndex`` once for a run of gathers through the same tables: every layer of
    an engine step reads its own pools through the step's one set of block tables.

    Invariant: what ``take(name, ...)`` returned is valid until the next ``take`` of the same
    name; a caller consumes it before it gathers again."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], Tensor] = {}
        self._index: tuple[tuple, GatherIndex] | None = None  # (what it was made from, it)

    def take(self, name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """An uninitialised tensor of ``shape`` with ``like``'s dtype and device."""
        numel = math.prod(shape)
        key = (name, like.dtype, like.device)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < numel:
            # A normal tensor even when made under torch.inference_mode(), whose tensors
            # could not be written again outside it: the workspace outlives the mode.
            with torch.inference_mode(False):
                buffer = self._buffers[key] = like.new_empty(numel)
        return buffer[:numel].view(shape)

    def index(
        self, block_tables: Tensor, seq_lens: Tensor, block_size: int, num_blocks: int
    ) -> GatherIndex:
        """``gather_index(block_tables, seq_lens, block_size, num_blocks)``, the last one
        again when called with the same values. Compared by value (a few hundred integers,
        cheaper than the handful of tensor operations that make an index), so a table
        changed in place is never read through a stale index."""
        made_from = (block_tables.tolist(), seq_lens.tolist(), block_size, num_blocks)
        made_from += (block_tables.device,)
        if self._index is None or self._index[0] != made_from:
            self._index = (made_from, gather_index(block_tables, seq_lens, block_size, num_blocks))
        return self._index[1]


_per_thread = threading.local()


def thread_workspace() -> Workspace:
    """This thread's workspace: two engines stepping in two threads never share a buffer."""
    if not hasattr(_per_thread, "workspace"):
        _per_thread.workspace = Workspace()
    return _per_thread.workspace


def gather_kv(
    key_pool: Tensor,
    value_pool: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    block_size: int,
    *,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
    workspace: Workspace | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Each sequence's keys and values in token order, read through its block table. Returns
    ``keys`` and ``values`` ``[num_kv_heads, batch, max_len, head_dim]`` (KV head first, so a
    head's tokens are contiguous for the matrix products), with ``max_len`` the longest sequence
    rounded up to whole blocks, and ``valid`` ``[batch, max_len]`` = position < seq_len.

    Keys and values at invalid positions are set to 0, so NaN or inf in unused slots cannot
    reach a result: masking their scores would not be enough for the values (a zero
    probability does not help: NaN * 0 = NaN), nor for the keys of an attention that adds
    $-\\infty$ to a masked score, as ``scaled_dot_product_attention`` does (NaN - inf = NaN).

    FP8 pools are dequantized here, after the gather, with each KV head's ``k_scale`` and
    ``v_scale`` (``[num_kv_heads]``): only the gathered blocks are converted, never the pool.

    With a ``workspace`` the keys and values are views of its buffers (valid until its next
    gather) and ``valid`` is its index's, to read and never to write; without one they are
    fresh tensors the caller may keep."""
    batch_size = block_tables.shape[0]
    num_blocks, num_kv_heads, _, head_dim = key_pool.shape
    paged = (block_tables, seq_lens, block_size, num_blocks)
    table, valid, unused, max_len = (
        gather_index(*paged) if workspace is None else workspace.index(*paged)
    )
    max_blocks = max_len // block_size

    def gather(pool: Tensor, name: str) -> Tensor:
        # Block T_b[j] of each KV head: one index_select per head copies whole [B, d_h] blocks
        # into place, about twice as fast as one advanced-indexing copy of
        # [N_KV, batch, max_blocks, B, d_h], which moves element by element.
        shape = (num_kv_heads, batch_size * max_blocks, block_size, head_dim)
        blocks = pool.new_empty(shape) if workspace is None else workspace.take(name, shape, pool)
        for kv_head in range(num_kv_heads):
            torch.index_select(pool[:, kv_head], 0, table, out=blocks[kv_head])
        return blocks.view(num_kv_heads, batch_size, max_len, head_dim)

    keys = dequantize_unchecked(gather(key_pool, "keys"), per_kv_head(k_scale, 4))
    values = dequantize_unchecked(gather(value_pool, "values"), per_kv_head(v_scale, 4))
    # Positions L_b .. max_len - 1 were never written and may hold NaN: zero them. index_fill_
    # zeroes whole [head_dim] rows by number. masked_fill_ with a [batch, max_len] mask
    # broadcast over head_dim tests element by element: on the CPU it took as long as the
    # gather itself, three times as long on the mixed lengths of ``bench engine``.
    for gathered in (keys, values):
        gathered.view(num_kv_heads, batch_size * max_len, head_dim).index_fill_(1, unused, 0.0)
    return keys, values, valid


def per_kv_head(scale: Tensor | None, dims: int) -> Tensor | None:
    """A ``[num_kv_heads]`` scale shaped to broadcast over a ``dims``-dimensional tensor
    whose first axis is the KV head."""
    return None if scale is None else scale.view(-1, *[1] * (dims - 1))
