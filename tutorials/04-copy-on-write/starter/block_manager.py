"""Exercise 04: append with copy-on-write (source text §5, "Write execution and block splitting").

Your ``BlockManager`` is the library's, with ``append_slot`` left for you to write. Fill in the
region marked ``# --- your code here ---``, then run

    minipaged exercises check 4

What you can use (all from the library class):

- ``self.table(seq)``: T_r, a ``BlockTable`` with ``blocks`` (list of block ids),
  ``num_tokens``, ``logical_block(t)``, ``offset(t)``, ``slot(t)`` and ``is_last_block_full``;
- ``self.device``: the pool, with ``allocate()``, ``refcount(p)``, ``decref(p)`` and
  ``num_free``; ``allocate`` raises ``OutOfBlocks`` when no block is free.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipaged import block_manager
from minipaged.allocator import OutOfBlocks
from minipaged.block_manager import AppendResult
from minipaged.events import SeqId


class BlockManager(block_manager.BlockManager):
    def append_slot(self, seq: SeqId, token_ids: Sequence[int] | None = None) -> AppendResult:
        """Reserve the slot for ``seq``'s next token, at position t = its num_tokens.

        - t mod B = 0: the last block is full; a fresh block becomes logical block j.
        - R[p] = 1 for p = T_r[j]: the block is ours alone; write in place.
        - R[p] > 1: shared. Copy-on-write: allocate p_new, R[p] -= 1, T_r[j] = p_new, and
          return cow=(p, p_new) so the caller copies the o rows already written.

        Return ``AppendResult(slot, cow)`` with slot = T_r[j] * B + o (after any copy), and
        count the token in ``num_tokens``. When a block is needed and none is free, raise
        ``OutOfBlocks`` before changing anything, and ``ValueError`` for a sequence swapped
        out to the host (its table's ``pool`` is ``"host"``). (``token_ids`` serves prefix
        caching, exercise 12: ignore it here.)
        """
        # --- your code here (about 15 lines) ---
        raise NotImplementedError("exercise 04: reserve the slot for token t, copying on write")
