"""Exercise 05, part 1: swapping (source text §6).

Your ``BlockManager`` is the library's, with ``swap_out`` and ``swap_in`` left for you to
write. Fill in the regions marked ``# --- your code here ---``, then run

    minipaged exercises check 5

What you can use (all from the library class):

- ``self.table(seq)``: T_r, a ``BlockTable`` with ``blocks`` and ``pool`` (``"device"`` or
  ``"host"``); you change both;
- ``self.device`` and ``self.host``: the two pools (``self.host`` is None without swap
  space), each with ``allocate()``, ``incref(p)``, ``decref(p)`` and ``num_free``.
"""

from __future__ import annotations

from collections.abc import Iterable

from minipaged import block_manager
from minipaged.allocator import OutOfBlocks
from minipaged.events import SeqId


class BlockManager(block_manager.BlockManager):
    def swap_out(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        """Move the tables of ``seqs`` (all on the device) to the host pool and return the
        (device, host) block copies to run, each distinct block once.

        For each block of each table: give it a host block (a block already moved for an
        earlier table of the group gets its host block's R raised instead), decrement its
        device R, and put the host id in the table. Then set the table's pool to ``"host"``.
        When the host pool cannot hold every distinct block, raise OutOfBlocks and change
        nothing."""
        # --- your code here (about 20 lines; a helper that moves either way serves both) ---
        raise NotImplementedError("exercise 05: move the tables to the host pool")

    def swap_in(self, seqs: Iterable[SeqId]) -> list[tuple[int, int]]:
        """The reverse: bring swapped-out ``seqs`` back to the device and return the (host,
        device) copies. Refuse (ValueError) a sequence that is not in host memory, before
        moving any table."""
        # --- your code here ---
        raise NotImplementedError("exercise 05: move the tables back to the device pool")
