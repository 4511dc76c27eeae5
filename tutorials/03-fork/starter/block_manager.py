"""Exercise 03: fork for parallel sampling and beam search (source text §5, "The Copy-on-Write
forking protocol").

Your ``BlockManager`` is the library's, with ``fork`` and ``free`` left for you to write. Fill in
the regions marked ``# --- your code here ---``, then run

    minipaged exercises check 3

What you can use (all from the library class):

- ``self.tables``: a dict from sequence id to its ``BlockTable`` T_r (``blocks``,
  ``num_tokens``, ``pool``); ``self.table(seq)`` raises KeyError for an unknown sequence;
- ``BlockTable(block_size, blocks, num_tokens)`` makes a table;
- ``self.device``: the pool, with ``incref(p)`` and ``decref(p)`` (each returns the new R[p]);
  a swapped-out table (``pool == "host"``) holds ids of ``self.host`` instead.
"""

from __future__ import annotations

from minipaged import block_manager
from minipaged.block_table import BlockTable
from minipaged.events import SeqId


class BlockManager(block_manager.BlockManager):
    def fork(self, parent: SeqId, child: SeqId) -> BlockTable:
        """Give ``child`` a copy of T_parent (§5, step 1) and raise R[p] by one for every p in
        it (step 2). Allocate nothing and copy no key or value (step 3). Return the child's
        table. A ``child`` that already has a table raises ValueError, as does a ``parent``
        swapped out to the host (``self.table(parent).pool == "host"``); a ``parent`` with no
        table raises KeyError. Refuse before changing anything."""
        # --- your code here (about 7 lines) ---
        raise NotImplementedError("exercise 03: copy the table, raise each refcount")

    def free(self, seq: SeqId) -> None:
        """``seq`` is finished: drop its table and decrement R[p] for each of its blocks, in the
        pool the table lives in; a block no other table holds returns to the free list.
        Release the last block first, so a prefix cache loses a prefix from its tail."""
        # --- your code here (about 4 lines) ---
        raise NotImplementedError("exercise 03: decrement each refcount, drop the table")
