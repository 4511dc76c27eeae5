"""Exercise 02: a refcounted block allocator (source text §3 and §5).

Fill in each region marked ``# --- your code here ---``, then run

    minipaged exercises check 2

The names and signatures are those of ``minipaged.allocator``, so the same checks grade both,
and the library's block manager can run on your allocator.
"""

from __future__ import annotations


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


class BlockAllocator:
    """A pool of ``num_blocks`` (P_max) physical blocks, each with a refcount R[p].

    Keep, after every method:

    - R[p] >= 0 for every block p;
    - p is on the free list iff R[p] = 0, and at most once;
    - num_free + num_used == num_blocks;
    - the free list is in the order blocks were freed (a new pool: 0, 1, ..., P_max - 1);
      ``allocate`` takes from the front, a freed block joins the back.

    Every method given a block id outside 0..num_blocks-1 raises IndexError (a negative id
    must not wrap around to the end of a Python list).
    """

    def __init__(self, num_blocks: int, pool: str = "device") -> None:
        self.pool = pool  # "device" or "host": name it in error messages
        self.num_blocks = num_blocks
        # --- your code here: the refcounts R and the free list (about 2 lines) ---
        raise NotImplementedError("exercise 02: store R[p] for every block, and the free list")

    @property
    def num_free(self) -> int:
        # --- your code here (1 line) ---
        raise NotImplementedError("exercise 02: how many blocks are free")

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def refcount(self, block: int) -> int:
        """R[p]: how many block tables hold ``block`` (0 when it is free)."""
        # --- your code here (about 3 lines) ---
        raise NotImplementedError("exercise 02: return R[p]")

    def refcounts(self) -> tuple[int, ...]:
        """R for the whole pool, indexed by block id."""
        return tuple(self.refcount(p) for p in range(self.num_blocks))

    def free_blocks(self) -> tuple[int, ...]:
        """The free list in allocation order: the next ``allocate`` returns the first."""
        # --- your code here (1 line) ---
        raise NotImplementedError("exercise 02: return the free list as a tuple")

    def allocate(self) -> int:
        """Take the first free block and set R[p] = 1. Raise OutOfBlocks when none is free."""
        # --- your code here (about 4 lines) ---
        raise NotImplementedError("exercise 02: take the front of the free list")

    def take(self, block: int) -> int:
        """Allocate this particular free block (R[p]: 0 to 1) and return it; a block in use
        raises ValueError. (A prefix-cache hit on a freed block whose contents are intact.)"""
        # --- your code here (about 5 lines) ---
        raise NotImplementedError("exercise 02: allocate a given free block")

    def incref(self, block: int) -> int:
        """One more table holds ``block``: R[p] += 1; return the new R[p].
        A free block cannot be shared: raise ValueError."""
        # --- your code here (about 4 lines) ---
        raise NotImplementedError("exercise 02: R[p] += 1")

    def decref(self, block: int) -> int:
        """One table lets go of ``block``: R[p] -= 1; at 0 the block joins the back of the
        free list. Return the new R[p]. A free block raises ValueError (a double free)."""
        # --- your code here (about 6 lines) ---
        raise NotImplementedError("exercise 02: R[p] -= 1, and free the block at 0")
