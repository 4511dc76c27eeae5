"""Exercise 06: write the invariants.

``BlockManagerProgram`` runs random programs of allocate / append / fork / free / swap-out /
swap-in against a block manager and asserts nothing. Your ``BlockManagerMachine`` adds the
properties: each ``@invariant()`` runs after every step and must ``assert`` a rule of the
source text. Fill in the regions marked ``# --- your code here ---``, then run

    minipaged exercises check 6

which runs your properties against the library's BlockManager (they must all hold) and against
five broken block managers, the bug zoo (each must fail an ``assert``). Write the rules
yourself, from the source text: do not import ``minipaged.invariants``.

What you can read in a property:

- ``state = self.manager.snapshot()``: ``state.block_size``; ``state.tables`` (seq id ->
  ``blocks``, ``num_tokens``, ``pool``); ``state.device_refcounts`` and
  ``state.host_refcounts`` (R[p] by block id); ``state.device_free`` and ``state.host_free``
  (the free lists);
- ``self.kv.written[seq]``: the tokens ``seq`` wrote; ``self.kv.read(self.manager.table(seq))``:
  what reading through its block table gives back;
- ``self.last_write``: the slot the last step wrote a token into, or None.
"""

from __future__ import annotations

from hypothesis.stateful import invariant

from minipaged.grader.properties import BlockManagerProgram


class BlockManagerMachine(BlockManagerProgram):
    @invariant()
    def refcounts_match_tables(self):
        """R[p] equals the number of block tables that hold p, in each pool."""
        # --- your code here (about 8 lines) ---
        raise NotImplementedError("exercise 06: refcount conservation")

    @invariant()
    def free_list_holds_exactly_the_unreferenced_blocks(self):
        """p is on the free list iff R[p] = 0, and at most once."""
        # --- your code here (about 6 lines) ---
        raise NotImplementedError("exercise 06: free iff R = 0")

    @invariant()
    def writes_land_in_private_blocks(self):
        """Copy-on-write (§5): the block the last token was written into has R[p] = 1."""
        # --- your code here (about 4 lines) ---
        raise NotImplementedError("exercise 06: exclusive writes")

    @invariant()
    def every_sequence_reads_back_its_own_tokens(self):
        """Reading a sequence through T_r gives exactly the tokens it wrote."""
        # --- your code here (about 4 lines) ---
        raise NotImplementedError("exercise 06: read-back")

    def after_all_freed(self):
        """Runs once every sequence is freed: no block may still be in use (no leak)."""
        # --- your code here (about 4 lines) ---
        raise NotImplementedError("exercise 06: no leak")
