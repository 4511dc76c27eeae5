"""What the block manager answers and reports: admission status, where a token goes, and
immutable snapshots of the whole block state.

These are plain values: the scheduler reads ``AllocStatus`` and ``AppendResult``; the TUI,
traces and ``minipaged.invariants`` read ``BlockState``. Nothing here changes a pool.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from minipaged.allocator import BlockAllocator
from minipaged.block_table import BlockTable
from minipaged.events import SeqId
from minipaged.prefix_cache import PrefixCache


class AllocStatus(enum.Enum):
    """vLLM's answer to ``can_allocate``:

    - ``OK``: the blocks are free now, with the watermark kept;
    - ``LATER``: not now, but they will be once running requests release theirs;
    - ``NEVER``: not even an empty pool can hold them and keep the watermark free, so the
      request must be refused rather than wait forever.

    Only ``OK`` is true, so ``if manager.can_allocate(...)`` still reads as the yes/no
    question it asks."""

    OK = "ok"
    LATER = "later"
    NEVER = "never"

    def __bool__(self) -> bool:
        return self is AllocStatus.OK


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where the next token goes. ``slot`` is $\\mathcal{T}_r[j] \\cdot B + o$ after any
    copy-on-write; ``cow`` is the (src, dst) block copy to run first, or None."""

    slot: int
    cow: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TableState:
    """One block table $\\mathcal{T}_r$ as it was: its block ids, length $L$ and pool."""

    blocks: tuple[int, ...]
    num_tokens: int
    pool: str


@dataclass(frozen=True, slots=True)
class BlockState:
    """A cheap immutable snapshot of everything the manager knows, for the TUI, traces and
    ``minipaged.invariants``."""

    block_size: int
    tables: dict[SeqId, TableState]
    device_refcounts: tuple[int, ...]
    host_refcounts: tuple[int, ...]
    device_free: tuple[int, ...]
    host_free: tuple[int, ...]
    cached: tuple[int, ...] = ()  # device blocks registered in the prefix cache


def snapshot(
    block_size: int,
    tables: Mapping[SeqId, BlockTable],
    device: BlockAllocator,
    host: BlockAllocator | None,
    prefix_cache: PrefixCache | None,
) -> BlockState:
    """The ``BlockState`` of these tables over these pools (copies: later changes leave it)."""
    empty: tuple[int, ...] = ()
    return BlockState(
        block_size=block_size,
        tables={
            seq: TableState(tuple(t.blocks), t.num_tokens, t.pool) for seq, t in tables.items()
        },
        device_refcounts=device.refcounts(),
        host_refcounts=host.refcounts() if host else empty,
        device_free=device.free_blocks(),
        host_free=host.free_blocks() if host else empty,
        cached=prefix_cache.cached_blocks() if prefix_cache else empty,
    )


def holders(tables: Mapping[SeqId, BlockTable], j: int, block: int) -> Iterator[SeqId]:
    """The device tables whose entry $\\mathcal{T}_r[j]$ is ``block``. A shared block sits at
    the same logical index $j$ in every table holding it: fork copies tables position by
    position, and a prefix hit shares a whole prefix."""
    for seq, table in tables.items():
        if table.pool == "device" and table.blocks[j : j + 1] == [block]:
            yield seq
