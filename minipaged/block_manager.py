"""The block manager: every sequence's block table over a device pool and a host swap pool.

This is the memory manager of the source text: allocation on demand (§3), forking and
copy-on-write (§5), swapping between device and host memory (§6). It holds metadata only; the
copies it decides on (copy-on-write pairs, swap mappings) are returned to the caller, which runs
them on the ``KVCache``. Every change is also recorded as an event (``minipaged.events``).

The protocol pairs a question with an action, so the scheduler can decide before anything
changes: ``can_allocate`` / ``allocate``, ``can_append`` / ``append_slot``,
``can_swap_out`` / ``swap_out``, ``can_swap_in`` / ``swap_in``. Questions (``can_*``,
``blocks_needed``, ``next_token_blocks``, ``prefix_hits``, ``table``, ``snapshot``) never
change anything, the prefix cache included. Every action that releases blocks (``free``,
``swap_out``, hence preemption) releases a table's last block first, so a cached child block
always sits ahead of its parent on the free list and is evicted first: a cached prefix is lost
from its tail, never cut at its root.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from minipaged import block_state, events, memory, paging_arguments
from minipaged.allocator import BlockAllocator, OutOfBlocks
from minipaged.block_state import AllocStatus, AppendResult, BlockState, TableState
from minipaged.block_table import BlockTable
from minipaged.config import check_setting
from minipaged.events import Event, SeqId
from minipaged.paging_arguments import check_token_ids, prompt_length, sequence_id
from minipaged.prefix_cache import HashPrefixCache, PrefixCache
from minipaged.python_numbers import python_number
from minipaged.radix_cache import RadixCache
from minipaged.watermark import watermark_blocks

# Re-exported: the TUI, traces and exercises import these from here.
__all__ = ["AllocStatus", "AppendResult", "BlockManager", "BlockState", "TableState"]

PREFIX_CACHES: dict[str, type[HashPrefixCache] | type[RadixCache]] = {
    "hash": HashPrefixCache,  # vLLM: chained block hashes (minipaged.prefix_cache)
    "radix": RadixCache,  # SGLang: a radix tree over token runs (minipaged.radix_cache)
}
"""The prefix caches ``BlockManager(prefix_caching=...)`` names; both answer ``match``,
``insert`` and ``forget`` (``minipaged.prefix_cache.PrefixCache``)."""


class BlockManager:
    """Block tables $\\mathcal{T}_r$ for every sequence, over a device pool of
    ``num_gpu_blocks`` ($\\mathcal{P}_{\\max}$) and a host pool of ``num_cpu_blocks``.

    Invariants (checked by ``minipaged.invariants.check``): $\\mathcal{R}[p]$ equals the
    number of tables holding $p$ in its pool; a block is free iff $\\mathcal{R}[p] = 0$; every
    table has $\\lceil L/B \\rceil$ blocks, all in one pool; a write never lands in a shared
    block; once every sequence is freed, every block is free.

    ``watermark`` keeps $W$ = int(watermark * P_max) device blocks free when admitting new
    work, so running sequences can grow before one is preempted (``minipaged.watermark``).

    ``prefix_caching`` (``"hash"`` or ``"radix"``) keeps full blocks findable by their tokens
    after their last holder lets go (``minipaged.prefix_cache``): a new sequence given its
    ``token_ids`` starts from the cached blocks of its longest cached prefix.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        num_cpu_blocks: int = 0,
        block_size: int = 16,
        watermark: float = 0.01,
        prefix_caching: str | None = None,
    ) -> None:
        pools = dict(num_gpu_blocks=num_gpu_blocks, num_cpu_blocks=num_cpu_blocks)
        settings = dict(block_size=block_size, watermark=watermark, prefix_caching=prefix_caching)
        # the rules of EngineConfig's fields, the pools' sizes resolved; np.int64(16) is 16
        num_gpu_blocks, num_cpu_blocks = (check_setting(*p, resolved=True) for p in pools.items())
        block_size, watermark, prefix_caching = map(check_setting, settings, settings.values())
        self.block_size = block_size
        self.device = BlockAllocator(num_gpu_blocks, pool="device")
        # No swap space means no host pool: a pool has at least one block, so it is None.
        self.host = BlockAllocator(num_cpu_blocks, pool="host") if num_cpu_blocks else None
        self.watermark_blocks = watermark_blocks(watermark, self.device.num_blocks)
        self.prefix_cache: PrefixCache | None = None
        if prefix_caching is not None:
            self.prefix_cache = PREFIX_CACHES[prefix_caching](block_size)
        self.tables: dict[SeqId, BlockTable] = {}
        self._events: list[Event] = []

    # -- questions -------------------------------------------------------------------------

    def blocks_needed(self, num_tokens: int) -> int:
        """$M = \\lceil L / B \\rceil$ blocks hold ``num_tokens`` tokens."""
        return memory.num_logical_blocks(num_tokens, self.block_size)

    def can_allocate(self, *prompts: int | Sequence[int]) -> AllocStatus:
        """Can new sequences get their blocks while the watermark stays free? Each is given by
        its length or by its token ids; with prefix caching, blocks it finds cached and in use
        cost nothing, and cached blocks on the free list cost what a fresh block does.

        ``NEVER`` when the blocks they need without any sharing exceed what an empty pool
        gives while keeping the watermark, $\\mathcal{P}_{\\max} - W$; ``OK`` when they are
        free now; ``LATER`` otherwise."""
        needed = alone = 0
        for length, token_ids in map(prompt_length, prompts):  # np.int64(5) is 5
            hits = [] if token_ids is None else self.prefix_hits(token_ids)
            alone += self.blocks_needed(length)
            needed += self.blocks_needed(length)
            needed -= sum(1 for block in hits if self.device.refcount(block) > 0)
        return self._status(needed, alone)

    def can_append(self, *seqs: SeqId) -> bool:
        """Room for the next token of every sequence in ``seqs``: each needs a block when its
        last one is full, or shared and so must be copied first."""
        needed = sum(self._blocks_for_next_token(self._device_table(seq)) for seq in seqs)
        return self.device.num_free >= needed

    def next_token_blocks(self, *seqs: SeqId) -> int:
        """Device blocks the next token of each of ``seqs`` takes, in whichever pool they are:
        one when its last block is full or shared (copy-on-write), else none."""
        return sum(self._blocks_for_next_token(self.table(seq)) for seq in seqs)

    def can_swap_out(self, seqs: Iterable[SeqId]) -> bool:
        """The host pool can take every distinct block of ``seqs``."""
        needed = len(self._distinct_blocks(seqs, "device"))
        return self.host is not None and self.host.num_free >= needed

    def can_swap_in(self, seqs: Iterable[SeqId], extra_blocks: int = 0) -> AllocStatus:
        """Can the device pool take every distinct block of swapped-out ``seqs``, plus
        ``extra_blocks`` (room for their next tokens: ``next_token_blocks``), and keep the
        watermark? ``NEVER`` when not even an empty device pool could."""
        needed = len(self._distinct_blocks(seqs, "host")) + extra_blocks
        return self._status(needed, needed)

    def refcount(self, block: int, pool: str = "device") -> int:
        """$\\mathcal{R}[p]$ of ``block`` in ``pool``."""
        return self._pool(pool).refcount(block)

    def table(self, seq: SeqId) -> BlockTable:
        """$\\mathcal{T}_r$ of ``seq``; read it, do not change it."""
        seq = python_number(seq)  # np.int64(3) and torch.tensor(3) are sequence 3
        paging_arguments.check_known_sequence(seq, self.tables)
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
        seq, num_tokens = sequence_id(seq), python_number(num_tokens)  # np.int64(5) is 5
        if seq in self.tables:
            raise ValueError(f"sequence {seq!r} already has a block table; free it first")
        if type(num_tokens) is not int or num_tokens <= 0:
            raise ValueError(f"a sequence needs at least one token, got num_tokens={num_tokens!r}")
        if token_ids is not None and len(token_ids) != num_tokens:
            raise ValueError(f"token_ids has {len(token_ids)} ids for num_tokens={num_tokens}")
        check_token_ids(token_ids or ())
        needed = self.blocks_needed(num_tokens)
        if needed > self.device.num_blocks:
            raise ValueError(
                f"a sequence of {num_tokens} tokens needs {needed} blocks of B={self.block_size}, "
                f"more than the whole device pool of {self.device.num_blocks} blocks; "
                "use a shorter prompt or a larger pool"
            )
        hits = self.prefix_hits(token_ids) if token_ids is not None else []
        taken = sum(1 for block in hits if self.device.refcount(block) == 0)
        if needed - len(hits) + taken > self.device.num_free:
            raise OutOfBlocks(
                f"sequence {seq!r} needs {needed - len(hits) + taken} device blocks but only "
                f"{self.device.num_free} are free; ask can_allocate first"
            )
        table = BlockTable(self.block_size, num_tokens=num_tokens)
        if hits:  # the hit is recorded before the takes and shares it causes
            table.cached_tokens = len(hits) * self.block_size
            self.record(events.PrefixHit(seq, tuple(hits), table.cached_tokens))
        for j, block in enumerate(hits):
            if self.device.refcount(block) == 0:
                self.device.take(block)
                self.record(events.Alloc(seq, j, block))
            else:
                self.record(events.Incref(seq, j, block, self.device.incref(block)))
            table.blocks.append(block)
        while len(table.blocks) < needed:
            self._append_block(seq, table)
        self.tables[seq] = table
        if token_ids is not None:
            self._register_full_blocks(seq, token_ids)
        return table

    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        """Reserve the slot for ``seq``'s next token at position $t$ = its length (§5).

        - $t \\bmod B = 0$: the last block is full; a fresh block becomes logical block $j$.
        - $\\mathcal{R}[p] = 1$ for $p = \\mathcal{T}_r[j]$: exclusive, write in place.
        - $\\mathcal{R}[p] > 1$: shared. Copy-on-write: allocate $p_{new}$ with $R = 1$, the
          caller copies the $o$ rows already written, $\\mathcal{R}[p] \\leftarrow
          \\mathcal{R}[p] - 1$, and $\\mathcal{T}_r[j] \\leftarrow p_{new}$: write there.

        With prefix caching, pass the sequence's ``token_ids`` (the new token included): a
        block this token fills is registered in the cache.
        """
        seq = python_number(seq)
        table = self._device_table(seq)
        self._check_append(seq, table, token_ids)
        t = table.num_tokens
        j, o = divmod(t, self.block_size)  # the manager's own B and length: nothing to check
        cow = None
        if table.is_last_block_full:
            self._append_block(seq, table)
        elif self.device.refcount(table.blocks[j]) > 1:
            src = table.blocks[j]
            dst = self._fresh_block()  # 1. a new block, R[dst] = 1
            cow = (src, dst)  # 2. the caller copies the o rows already written
            self.device.decref(src)  # 3. R[src] <- R[src] - 1
            table.blocks[j] = dst  # 4. T_r[j] <- dst
            self._record_cow(seq, t, src, dst)
        table.num_tokens += 1
        if token_ids is not None and table.is_last_block_full:
            self._register_full_blocks(seq, token_ids)
        return AppendResult(table.blocks[j] * self.block_size + o, cow)  # slot (memory.slot)

    def fork(self, parent: SeqId, child: SeqId) -> BlockTable:
        """Give ``child`` the parent's block table (§5, step 1) and raise each shared block's
        refcount by one (step 2). No key or value is copied: afterwards $\\mathcal{R}[p]$ counts
        both tables for every $p$ in $\\mathcal{T}_{parent}$. Forking $k - 1$ children gives the
        source text's $\\mathcal{R}[p] \\leftarrow \\mathcal{R}[p] + (k - 1)$."""
        parent, child = python_number(parent), sequence_id(child)
        source = self._device_table(parent)
        if child in self.tables:
            raise ValueError(f"cannot fork into sequence {child!r}: it already has a block table")
        table = BlockTable(self.block_size, list(source.blocks), source.num_tokens)
        self.record(events.Fork(parent, child, tuple(table.blocks)))
        for j, block in enumerate(table.blocks):
            self.record(events.Incref(child, j, block, self.device.incref(block)))
        self.tables[child] = table
        return table

    def free(self, seq: SeqId) -> None:
        """``seq`` is finished (or preempted by recomputation, §6): drop its table and decrement
        every block's refcount; blocks no other table holds return to the free list.

        Blocks are released last block first, so that a cached child block always sits ahead
        of its parent on the free list and is evicted first."""
        seq = python_number(seq)
        table = self.table(seq)
        pool = self._pool(table.pool)
        for block in reversed(table.blocks):
            after = pool.decref(block)
            released = events.Free(seq, block, table.pool)
            self.record(released if after == 0 else events.Decref(seq, block, after, table.pool))
        del self.tables[seq]

    def swap_out(self, seqs: Iterable[SeqId] | SeqId) -> list[tuple[int, int]]:
        """Move the tables of ``seqs`` (one id, or a request's) to the host pool (§6, swapping)
        and return the (device, host) block copies to run, each block once: a block shared
        inside the group gets one host block whose refcount counts the same tables."""
        return self._move(seqs, "device", "host")

    def swap_in(self, seqs: Iterable[SeqId] | SeqId) -> list[tuple[int, int]]:
        """Bring swapped-out ``seqs`` back to the device; returns the (host, device) copies."""
        return self._move(seqs, "host", "device")

    def record(self, event: Event) -> None:
        """Add an event of the caller's (a preemption, say) to the stream, in order."""
        self._events.append(event)

    def pop_events(self) -> list[Event]:
        """The events recorded since the last call, oldest first."""
        popped, self._events = self._events, []
        return popped

    def snapshot(self) -> BlockState:
        """Everything the manager knows, as an immutable ``BlockState``."""
        return block_state.snapshot(
            self.block_size, self.tables, self.device, self.host, self.prefix_cache
        )

    # -- internals -------------------------------------------------------------------------

    def _status(self, needed: int, alone: int) -> AllocStatus:
        """``needed`` blocks now, ``alone`` on an empty pool, the watermark $W$ kept free."""
        if self.device.num_blocks - alone < self.watermark_blocks:
            return AllocStatus.NEVER
        if self.device.num_free - needed >= self.watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def _pool(self, name: str) -> BlockAllocator:
        if name == "device":
            return self.device
        if name == "host" and self.host is not None:
            return self.host
        raise ValueError(f"no {name!r} pool: this manager was built with num_cpu_blocks=0")

    def _fresh_block(self) -> int:
        """A free device block, $R = 1$. With prefix caching it may still be cached: its old
        contents are evicted (the free list's front: the least recently released)."""
        block = self.device.allocate()
        if self.prefix_cache is not None and self.prefix_cache.forget(block):
            self.record(events.PrefixEvict(block))
        return block

    def _append_block(self, seq: SeqId, table: BlockTable) -> None:
        """A fresh device block becomes ``seq``'s next logical block $j$."""
        block = self._fresh_block()
        self.record(events.Alloc(seq, len(table.blocks), block))
        table.blocks.append(block)

    def _check_append(self, seq: SeqId, table: BlockTable, token_ids: Sequence[int] | None) -> None:
        """Refuse an append before it changes anything."""
        if self._blocks_for_next_token(table) > self.device.num_free:
            raise OutOfBlocks(
                f"sequence {seq!r} needs a new device block for token {table.num_tokens} "
                "but none is free; ask can_append first and preempt a sequence"
            )
        if token_ids is not None and len(token_ids) != table.num_tokens + 1:
            raise ValueError(
                f"token_ids has {len(token_ids)} ids; sequence {seq!r} will hold "
                f"{table.num_tokens + 1} tokens"
            )
        check_token_ids(token_ids or (), table.num_tokens)  # the new one: the rest were checked

    def _record_cow(self, seq: SeqId, t: int, src: int, dst: int) -> None:
        """The events of the copy-on-write that just moved ``seq``'s token ``t`` from ``src``
        to ``dst``, naming the other tables that still hold ``src``."""
        j = memory.logical_block(t, self.block_size)
        shared_with = tuple(
            other for other in block_state.holders(self.tables, j, src) if other != seq
        )
        after = self.device.refcount(src)
        offset = memory.block_offset(t, self.block_size)
        self.record(events.CowCopy(seq, t, j, src, dst, offset, after + 1, shared_with))
        self.record(events.Decref(seq, src, after))

    def prefix_hits(self, token_ids: Sequence[int]) -> list[int]:
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
            self.record(events.PrefixInsert(seq, tuple(added)))

    def _device_table(self, seq: SeqId) -> BlockTable:
        table = self.table(seq)
        if table.pool != "device":
            raise ValueError(f"sequence {seq!r} is swapped out to host memory; swap it in first")
        return table

    def _blocks_for_next_token(self, table: BlockTable) -> int:
        last = table.blocks[-1]  # full: a fresh block; shared: a copy-on-write
        return int(table.is_last_block_full or self._pool(table.pool).refcount(last) > 1)

    def _distinct_blocks(self, seqs: Iterable[SeqId], pool: str) -> set[int]:
        blocks: set[int] = set()
        for seq in [seqs] if isinstance(python_number(seqs), int) else seqs:  # one id, or several
            table = self.table(seq)
            if table.pool != pool:
                raise ValueError(f"sequence {seq!r} is in {table.pool} memory, not {pool} memory")
            blocks.update(table.blocks)
        return blocks

    def _move(self, seqs: Iterable[SeqId], src_name: str, dst_name: str) -> list[tuple[int, int]]:
        seqs = [seqs] if isinstance(python_number(seqs), int) else list(seqs)
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
            old = table.blocks
            for block in old:
                if block in mapping:
                    dst.incref(mapping[block])
                else:
                    mapping[block] = self._fresh_block() if dst is self.device else dst.allocate()
            for block in reversed(old):  # last block first, as free releases them
                src.decref(block)
            table.blocks = [mapping[block] for block in old]
            table.pool = dst_name
            event = events.SwapOut if dst_name == "host" else events.SwapIn
            self.record(event(seq, tuple(zip(old, table.blocks, strict=True))))
        return list(mapping.items())
