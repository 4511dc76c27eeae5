"""A block manager that takes whole steps at once when nobody records its events: what the
model-free simulator (``minipaged.study.simulator``) drives at a real model's scale.

``BlockManager`` is the teaching path: every token asks ``can_append`` and then runs
``append_slot``'s steps, and beam search forks one table and frees another, block by block.
At Llama-3-8B's scale that is millions of refcount changes, most of which cancel out. The two
shortcuts here make exactly the same decisions in fewer Python steps:

- ``try_append``: a token that lands in its sequence's own last block, not yet full, changes
  nothing but the table's length $L$; a token that needs a block (a fresh one at
  $t \\bmod B = 0$, or a copy-on-write of a shared block) takes it as ``append_slot`` does,
  and ``can_append``'s question is one test: is a block free?
- ``fork_replacing``: beam search drops a beam and forks a surviving one in its place. The fork
  raises $\\mathcal{R}[p]$ for every block of the parent, the free lowers it for every block of
  the dropped beam; on the blocks both tables hold (the prompt, most of the past) the two
  cancel. Only the blocks that one table holds and the other does not change.

Both take the plain path while events are recorded (the stream must show every step) and when
the device pool is not minipaged's own ``BlockAllocator`` (a student's allocator offers only
``incref`` and ``decref``). ``shortcuts = False`` forces the plain path too, so a test can
prove that the two paths give the same tables, refcounts and free list.
"""

from __future__ import annotations

from minipaged.allocator import BlockAllocator
from minipaged.block_manager import BlockManager
from minipaged.block_table import BlockTable
from minipaged.events import SeqId


class FastBlockManager(BlockManager):
    """``BlockManager`` plus two combined steps, ``try_append`` and ``fork_replacing``, each
    equal in effect to the plain calls its docstring names."""

    shortcuts = True  # False: always the plain calls (the equivalence tests switch it off)

    def try_append(self, seq: SeqId) -> bool:
        """``can_append(seq)`` then ``append_slot(seq)``: reserve the slot of ``seq``'s next
        token and return True, or return False and change nothing when no block is free for it.
        The caller learns no slot and no copy-on-write pair: a simulator moves no data."""
        table = self.tables.get(seq)
        if table is None or table.pool != "device" or not self._shortcut():
            if not self.can_append(seq):
                return False
            self.append_slot(seq)
            return True
        last = table.blocks[-1]
        full = table.num_tokens % self.block_size == 0
        if full or self.device.refcount(last) > 1:  # a fresh block, or a copy-on-write...
            if not self.device.num_free:  # ...needs a free one
                return False
            if full:
                self._append_block(seq, table)
            else:  # append_slot's copy-on-write without its events: the same three changes
                table.blocks[-1] = self._fresh_block()
                self.device.decref(last)
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
            or not self._shortcut()
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

    def _shortcut(self) -> bool:
        """Whether a combined step may skip the plain calls: the test of ``_unrecorded``."""
        return self.shortcuts and not self.recording and type(self.device) is BlockAllocator


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
