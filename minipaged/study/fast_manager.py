"""The block manager the model-free simulator (``minipaged.study.simulator``) drives at a real
model's scale: ``BlockManager`` with no event stream and two steps taken at once.

``minipaged.block_manager.BlockManager`` is the teaching path: every change is an event, every
token asks ``can_append`` and then runs ``append_slot``'s steps, and beam search forks one
table and frees another, block by block. At Llama-3-8B's scale that is millions of refcount
changes, most of which cancel out, and millions of events nobody reads. ``FastBlockManager``
makes exactly the same decisions in fewer Python steps:

- it keeps no events (``record`` drops them) and ``free`` builds none;
- ``try_append``: a token that lands in its sequence's own last block, not yet full, changes
  nothing but the table's length $L$; a token that needs a block (a fresh one at
  $t \\bmod B = 0$, or a copy-on-write of a shared block) takes it as ``append_slot`` does,
  and ``can_append``'s question is one test: is a block free?
- ``fork_replacing``: beam search drops a beam and forks a surviving one in its place. The fork
  raises $\\mathcal{R}[p]$ for every block of the parent, the free lowers it for every block of
  the dropped beam; on the blocks both tables hold (the prompt, most of the past) the two
  cancel. Only the blocks that one table holds and the other does not change.

It has no prefix cache (the simulator shares blocks by forking, never by looking tokens up).
``tests/test_simulator_fast_paths.py`` runs random programs and whole simulations on it and on
a plain ``BlockManager`` side by side: the tables, refcounts and free lists agree after every
step.
"""

from __future__ import annotations

from minipaged.block_manager import BlockManager
from minipaged.block_table import BlockTable
from minipaged.events import Event, SeqId


class FastBlockManager(BlockManager):
    """``BlockManager`` without events, plus two combined steps, ``try_append`` and
    ``fork_replacing``, each equal in effect to the plain calls its docstring names."""

    def __init__(self, num_gpu_blocks: int, num_cpu_blocks: int = 0, block_size: int = 16) -> None:
        super().__init__(num_gpu_blocks, num_cpu_blocks, block_size, watermark=0.0)

    def record(self, event: Event) -> None:
        """Nobody reads a simulation's events: drop them (``pop_events`` stays empty)."""

    def free(self, seq: SeqId) -> None:
        """``BlockManager.free`` without building its events: the same refcounts, and the
        blocks that reach $\\mathcal{R}[p] = 0$ join the free list in the same order (last
        block first)."""
        table = self.table(seq)
        pool = self.device if table.pool == "device" else self.host
        for block in reversed(table.blocks):
            pool.decref(block)
        del self.tables[seq]

    def try_append(self, seq: SeqId) -> bool:
        """``can_append(seq)`` then ``append_slot(seq)``: reserve the slot of ``seq``'s next
        token and return True, or return False and change nothing when no block is free for it.
        The caller learns no slot and no copy-on-write pair: a simulator moves no data."""
        table = self.tables.get(seq)
        if table is None or table.pool != "device":  # the plain calls name what is wrong
            if not self.can_append(seq):
                return False
            self.append_slot(seq)
            return True
        device, last = self.device, table.blocks[-1]
        full = table.num_tokens % self.block_size == 0
        if full or device.refcount(last) > 1:  # a fresh block, or a copy-on-write...
            if not device.num_free:  # ...needs a free one
                return False
            if full:
                table.blocks.append(device.allocate())
            else:  # append_slot's copy-on-write without its events: the same three changes
                table.blocks[-1] = device.allocate()
                device.decref(last)
        table.num_tokens += 1
        return True

    def fork_replacing(self, parent: SeqId, child: SeqId, dropped: SeqId) -> BlockTable:
        """``fork(parent, child)`` then ``free(dropped)``, with the same refcounts and the same
        free list afterwards.

        Why skipping the shared blocks changes nothing: a block both tables hold goes up by one
        and down by one, and the parent holds it throughout, so it never reaches
        $\\mathcal{R}[p] = 0$ in between. A block only the dropped table holds goes down as
        ``free`` takes it down, last block first, so the blocks that reach 0 join the free list
        in the same order.

        The child gets the dropped beam's ``BlockTable`` object, its suffix overwritten with the
        parent's: the same table ``fork`` would build, without copying the common prefix."""
        if dropped == parent:
            raise ValueError(f"cannot drop sequence {dropped!r}: it is the parent of the fork")
        source, old = self.tables.get(parent), self.tables.get(dropped)
        if (
            source is None
            or old is None
            or source.pool != "device"
            or old.pool != "device"
            or child in self.tables
        ):  # the plain calls, which also name whatever is wrong
            table = self.fork(parent, child)
            self.free(dropped)
            return table
        # Both tables hold their first c blocks in common; the rest they may share or not.
        c = _common_prefix(source.blocks, old.blocks)
        kept, gone = source.blocks[c:], old.blocks[c:]
        if kept != gone:
            kept_set, gone_set = set(kept), set(gone)
            for block in kept:  # the fork's raises; none is free, so any order
                if block not in gone_set:
                    self.device.incref(block)
            for block in reversed(gone):  # the free's drops, last block first, as free does
                if block not in kept_set:
                    self.device.decref(block)
        # The dropped table becomes the child's: only its last blocks need copying.
        old.blocks[c:] = kept
        old.num_tokens, old.cached_tokens = source.num_tokens, 0
        del self.tables[dropped]
        self.tables[child] = old
        return old


def _common_prefix(a: list[int], b: list[int]) -> int:
    """A length $c$ with ``a[:c] == b[:c]``, the longest when the two differ only in a suffix.

    Two tables that share a block hold it at the same index $j$ (``block_state.holders``), and
    two beams differ only in the blocks written since they parted, usually the last one or two:
    walk back over those from the end, then check the prefix in one comparison. A table holds a
    block once, so no block of ``a[c:]`` is in ``b[:c]``: the suffixes alone say what the two
    tables do not share."""
    c = min(len(a), len(b))
    while c and a[c - 1] != b[c - 1]:
        c -= 1
    return c if a[:c] == b[:c] else 0
