"""The block manager: every sequence's block table over a device pool and a host swap pool.

This is the memory manager of the source text: allocation on demand (§3), forking and
copy-on-write (§5), swapping between device and host memory (§6). It holds metadata only; the
copies it decides on (copy-on-write pairs, swap mappings) are returned to the caller, which runs
them on the ``KVCache``. Every change is also recorded as an event
(``minipaged.events``); ``BlockManager.pop_events`` hands them out.

The protocol pairs a question with an action, so the scheduler can decide before anything
changes: ``can_allocate`` / ``allocate``, ``can_append`` / ``append_slot``,
``can_swap_out`` / ``swap_out``, ``can_swap_in`` / ``swap_in``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from minipaged import memory
from minipaged.allocator import BlockAllocator, OutOfBlocks
from minipaged.block_table import BlockTable
from minipaged.events import (
    Alloc,
    CowCopy,
    Decref,
    Event,
    Fork,
    Free,
    Incref,
    PrefixEvict,
    PrefixHit,
    PrefixInsert,
    SeqId,
    SwapIn,
    SwapOut,
)
from minipaged.prefix_cache import PrefixCache, make_prefix_cache


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where the next token goes. ``slot`` is $\\mathcal{T}_r[j] \\cdot B + o$ after any
    copy-on-write; ``cow`` is the (src, dst) block copy to run first, or None."""

    slot: int
    cow: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TableState:
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


class BlockManager:
    """Block tables $\\mathcal{T}_r$ for every sequence, over a device pool of
    ``num_device_blocks`` ($\\mathcal{P}_{\\max}$) and a host pool of ``num_host_blocks``.

    Invariants (checked by ``minipaged.invariants.check``): $\\mathcal{R}[p]$ equals the
    number of tables holding $p$ in its pool; a block is free iff $\\mathcal{R}[p] = 0$; every
    table has $\\lceil L/B \\rceil$ blocks, all in one pool; a write never lands in a shared
    block; once every sequence is freed, every block is free.

    ``watermark`` keeps that fraction of the device pool free when admitting new work, so
    running sequences have room to grow before anyone must be preempted (as vLLM does).

    ``prefix_caching`` (``"hash"`` or ``"radix"``) keeps full blocks findable by their tokens
    after their last holder lets go (``minipaged.prefix_cache``): a new sequence given its
    ``token_ids`` starts from the cached blocks of its longest cached prefix.
    """

    def __init__(
        self,
        num_device_blocks: int,
        num_host_blocks: int = 0,
        block_size: int = 16,
        watermark: float = 0.01,
        prefix_caching: str | None = None,
    ) -> None:
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size (B) must be a positive integer, got {block_size!r}")
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be a fraction in [0, 1), got {watermark!r}")
        self.block_size = block_size
        self.device = BlockAllocator(num_device_blocks, pool="device")
        # No swap space means no host pool: a pool has at least one block, so it is None.
        self.host = BlockAllocator(num_host_blocks, pool="host") if num_host_blocks else None
        self.watermark_blocks = int(watermark * num_device_blocks)
        self.prefix_cache: PrefixCache | None = make_prefix_cache(prefix_caching, block_size)
        self.tables: dict[SeqId, BlockTable] = {}
        self._events: list[Event] = []

    # -- questions -------------------------------------------------------------------------

    def blocks_needed(self, num_tokens: int) -> int:
        """$M = \\lceil L / B \\rceil$ blocks hold ``num_tokens`` tokens."""
        return memory.num_logical_blocks(num_tokens, self.block_size)

    def can_allocate(self, *prompts: int | Sequence[int]) -> bool:
        """Room for new sequences while keeping the watermark free. Each is given by its length
        or by its token ids; with prefix caching, blocks it finds cached and in use cost
        nothing, and cached blocks on the free list cost what a fresh block does."""
        needed = 0
        for prompt in prompts:
            if isinstance(prompt, int):
                needed += self.blocks_needed(prompt)
            else:
                hits = self._prefix_hits(prompt)
                reused = sum(1 for block in hits if self.device.refcount(block) > 0)
                needed += self.blocks_needed(len(prompt)) - reused
        return self.device.num_free - needed >= self.watermark_blocks

    def can_append(self, *seqs: SeqId) -> bool:
        """Room for the next token of every sequence in ``seqs``: each needs a block when its
        last one is full, or shared and so must be copied first."""
        needed = sum(self._blocks_for_next_token(self._device_table(seq)) for seq in seqs)
        return self.device.num_free >= needed

    def can_swap_out(self, seqs: Iterable[SeqId]) -> bool:
        """The host pool can take every distinct block of ``seqs``."""
        needed = len(self._distinct_blocks(seqs, "device"))
        return self.host is not None and self.host.num_free >= needed

    def can_swap_in(self, seqs: Iterable[SeqId], extra_blocks: int = 0) -> bool:
        """The device pool can take every distinct block of ``seqs``, plus ``extra_blocks``
        (room for their next tokens), and keep the watermark."""
        needed = len(self._distinct_blocks(seqs, "host")) + extra_blocks
        return self.device.num_free - needed >= self.watermark_blocks

    def refcount(self, block: int, pool: str = "device") -> int:
        """$\\mathcal{R}[p]$ of ``block`` in ``pool``."""
        return self._pool(pool).refcount(block)

    def table(self, seq: SeqId) -> BlockTable:
        """$\\mathcal{T}_r$ of ``seq``; read it, do not change it."""
        if seq not in self.tables:
            raise KeyError(f"unknown sequence {seq!r}: it was never allocated or is already freed")
        return self.tables[seq]

    # -- actions ---------------------------------------------------------------------------

    def allocate(
        self, seq: SeqId, num_tokens: int, token_ids: Sequence[int] | None = None
    ) -> BlockTable:
        """Give a new sequence $\\lceil L/B \\rceil$ device blocks for its ``num_tokens``
        prompt tokens (§3: physical blocks need not be contiguous).

        With prefix caching and ``token_ids``, the longest cached prefix of full blocks is
        shared instead of allocated (``table.cached_tokens`` says how many tokens), except the
        block holding the last token: at least one token must be computed to get logits, and
        its block must be private to be written. The new full blocks are then registered.
        """
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already has a block table; free it first")
        if num_tokens <= 0:
            raise ValueError(f"a sequence needs at least one token, got num_tokens={num_tokens}")
        if token_ids is not None and len(token_ids) != num_tokens:
            raise ValueError(f"token_ids has {len(token_ids)} ids for num_tokens={num_tokens}")
        needed = self.blocks_needed(num_tokens)
        if needed > self.device.num_blocks:
            raise ValueError(
                f"a sequence of {num_tokens} tokens needs {needed} blocks of B={self.block_size}, "
                f"more than the whole device pool of {self.device.num_blocks} blocks; "
                "use a shorter prompt or a larger pool"
            )
        hits = self._prefix_hits(token_ids) if token_ids is not None else []
        taken = sum(1 for block in hits if self.device.refcount(block) == 0)
        if needed - len(hits) + taken > self.device.num_free:
            raise OutOfBlocks(
                f"sequence {seq!r} needs {needed - len(hits) + taken} device blocks but only "
                f"{self.device.num_free} are free; ask can_allocate first"
            )
        table = BlockTable(self.block_size, num_tokens=num_tokens)
        for j, block in enumerate(hits):
            if self.device.refcount(block) == 0:
                self.device.take(block)
                self.record(Alloc(seq, j, block))
            else:
                self.record(Incref(seq, j, block, self.device.incref(block)))
            table.blocks.append(block)
        if hits:
            table.cached_tokens = len(hits) * self.block_size
            self.record(PrefixHit(seq, tuple(hits), table.cached_tokens))
        for j in range(len(hits), needed):
            table.blocks.append(self._new_device_block(seq, j))
        self.tables[seq] = table
        if token_ids is not None:
            self._register_full_blocks(seq, token_ids)
        return table

    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        """Reserve the slot for ``seq``'s next token at position $t$ = its length (§5).

        - $t \\bmod B = 0$: the last block is full; a fresh block becomes logical block $j$.
        - $\\mathcal{R}[p] = 1$ for $p = \\mathcal{T}_r[j]$: exclusive, write in place.
        - $\\mathcal{R}[p] > 1$: shared. Copy-on-write: allocate $p_{new}$, copy the $o$ rows
          already written, $\\mathcal{R}[p] \\leftarrow \\mathcal{R}[p] - 1$,
          $\\mathcal{T}_r[j] \\leftarrow p_{new}$, and write there. The caller runs the copy.

        With prefix caching, pass the sequence's ``token_ids`` (the new token included): a
        block this token fills is registered in the cache.
        """
        table = self._device_table(seq)
        needed = self._blocks_for_next_token(table)
        if needed > self.device.num_free:
            raise OutOfBlocks(
                f"sequence {seq!r} needs a new device block for token {table.num_tokens} "
                "but none is free; ask can_append first and preempt a sequence"
            )
        t = table.num_tokens
        j = table.logical_block(t)
        cow = None
        if token_ids is not None and len(token_ids) != t + 1:
            raise ValueError(
                f"token_ids has {len(token_ids)} ids; sequence {seq!r} will hold {t + 1} tokens"
            )
        if table.is_last_block_full:
            table.blocks.append(self._new_device_block(seq, j))
        elif self.device.refcount(table.blocks[j]) > 1:
            src = table.blocks[j]
            dst = self._new_device_block(seq, j, record=False)
            # A shared block sits at the same logical index in every table holding it: fork
            # copies tables position by position, and a prefix hit shares a whole prefix.
            shared_with = tuple(
                other
                for other, t in self.tables.items()
                if other != seq and t.pool == "device" and t.blocks[j : j + 1] == [src]
            )
            before = self.device.refcount(src)
            table.blocks[j] = dst
            after = self.device.decref(src)
            cow = (src, dst)
            self.record(CowCopy(seq, t, j, src, dst, table.offset(t), before, shared_with))
            self.record(Decref(seq, src, after))
        table.num_tokens += 1
        if token_ids is not None and table.is_last_block_full:
            self._register_full_blocks(seq, token_ids)
        return AppendResult(table.slot(t), cow)

    def fork(self, parent: SeqId, child: SeqId) -> BlockTable:
        """Give ``child`` the parent's block table (§5, step 1) and raise each shared block's
        refcount by one (step 2). No key or value is copied: afterwards $\\mathcal{R}[p]$ counts
        both tables for every $p$ in $\\mathcal{T}_{parent}$. Forking $k - 1$ children gives the
        source text's $\\mathcal{R}[p] \\leftarrow \\mathcal{R}[p] + (k - 1)$."""
        source = self._device_table(parent)
        if child in self.tables:
            raise ValueError(f"cannot fork into sequence {child!r}: it already has a block table")
        table = BlockTable(self.block_size, list(source.blocks), source.num_tokens)
        self.record(Fork(parent, child, tuple(table.blocks)))
        for j, block in enumerate(table.blocks):
            self.record(Incref(child, j, block, self.device.incref(block)))
        self.tables[child] = table
        return table

    def free(self, seq: SeqId) -> None:
        """``seq`` is finished (or preempted by recomputation, §6): drop its table and decrement
        every block's refcount; blocks no other table holds return to the free list.

        Blocks are released last block first, so that a cached child block always sits ahead
        of its parent on the free list and is evicted first."""
        table = self.table(seq)
        pool = self._pool(table.pool)
        for block in reversed(table.blocks):
            after = pool.decref(block)
            event = (
                Free(seq, block, table.pool)
                if after == 0
                else Decref(seq, block, after, table.pool)
            )
            self.record(event)
        del self.tables[seq]

    def swap_out(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        """Move the tables of ``seqs`` to the host pool (§6, swapping) and return the
        (device, host) block copies to run, each block once: a block shared inside the group
        gets one host block whose refcount counts the same tables."""
        return self._move(list(seqs), "device", "host")

    def swap_in(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        """Bring swapped-out ``seqs`` back to the device; returns the (host, device) copies."""
        return self._move(list(seqs), "host", "device")

    def record(self, event: Event) -> None:
        """Add an event of the caller's (a preemption, say) to the stream, in order."""
        self._events.append(event)

    def pop_events(self) -> list[Event]:
        """The events recorded since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def snapshot(self) -> BlockState:
        empty: tuple[int, ...] = ()
        return BlockState(
            block_size=self.block_size,
            tables={
                seq: TableState(tuple(t.blocks), t.num_tokens, t.pool)
                for seq, t in self.tables.items()
            },
            device_refcounts=self.device.refcounts(),
            host_refcounts=self.host.refcounts() if self.host else empty,
            device_free=self.device.free_blocks(),
            host_free=self.host.free_blocks() if self.host else empty,
            cached=self.prefix_cache.cached_blocks() if self.prefix_cache else empty,
        )

    # -- internals -------------------------------------------------------------------------

    def _pool(self, name: str) -> BlockAllocator:
        if name == "device":
            return self.device
        if name == "host" and self.host is not None:
            return self.host
        raise ValueError(f"no {name!r} pool: this manager was built with num_host_blocks=0")

    def _new_device_block(self, seq: SeqId, j: int, record: bool = True) -> int:
        """A fresh device block for ``seq``'s logical block ``j``; with prefix caching, the
        block handed out may still be cached: its old contents are evicted."""
        block = self.device.allocate()
        if self.prefix_cache is not None and self.prefix_cache.forget(block):
            self.record(PrefixEvict(block))
        if record:
            self.record(Alloc(seq, j, block))
        return block

    def _prefix_hits(self, token_ids: Sequence[int]) -> list[int]:
        """Cached blocks for the full blocks of ``token_ids`` before the block of its last
        token (which is always computed)."""
        if self.prefix_cache is None:
            return []
        limit = (len(token_ids) - 1) // self.block_size
        return self.prefix_cache.match(token_ids)[:limit]

    def _register_full_blocks(self, seq: SeqId, token_ids: Sequence[int]) -> None:
        if self.prefix_cache is None:
            return
        added = self.prefix_cache.insert(token_ids, self.tables[seq].blocks)
        if added:
            self.record(PrefixInsert(seq, tuple(added)))

    def _device_table(self, seq: SeqId) -> BlockTable:
        table = self.table(seq)
        if table.pool != "device":
            raise ValueError(f"sequence {seq!r} is swapped out to host memory; swap it in first")
        return table

    def _blocks_for_next_token(self, table: BlockTable) -> int:
        if table.is_last_block_full:
            return 1
        return 1 if self.device.refcount(table.blocks[-1]) > 1 else 0

    def _distinct_blocks(self, seqs: Iterable[SeqId], pool: str) -> set[int]:
        blocks: set[int] = set()
        for seq in seqs:
            table = self.table(seq)
            if table.pool != pool:
                raise ValueError(f"sequence {seq!r} is in {table.pool} memory, not {pool} memory")
            blocks.update(table.blocks)
        return blocks

    def _move(self, seqs: list[SeqId], src_name: str, dst_name: str) -> list[tuple[int, int]]:
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"sequences {seqs} name a sequence twice; name each once")
        needed = len(self._distinct_blocks(seqs, src_name))
        src, dst = self._pool(src_name), self._pool(dst_name)
        if needed > dst.num_free:
            raise OutOfBlocks(
                f"cannot move sequences {seqs} to {dst_name} memory: they need {needed} "
                f"{dst_name} blocks but only {dst.num_free} are free"
            )
        mapping: dict[int, int] = {}
        for seq in seqs:
            table = self.tables[seq]
            pairs = []
            for j, block in enumerate(table.blocks):
                if block in mapping:
                    dst.incref(mapping[block])
                elif dst is self.device:
                    mapping[block] = self._new_device_block(seq, j, record=False)
                else:
                    mapping[block] = dst.allocate()
                pairs.append((block, mapping[block]))
                src.decref(block)
                table.blocks[j] = mapping[block]
            table.pool = dst_name
            event = SwapOut if dst_name == "host" else SwapIn
            self.record(event(seq, tuple(pairs)))
        return list(mapping.items())
