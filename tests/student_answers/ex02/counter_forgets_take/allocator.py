"""Keeps a count of free blocks beside the free list, and take forgets to lower it: num_free
says one more block is free than the list holds.

Fails: take_allocates_a_given_free_block
"""

from __future__ import annotations


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


class BlockAllocator:
    def __init__(self, num_blocks: int, pool: str = "device") -> None:
        self.pool = pool
        self.num_blocks = num_blocks
        self.refs = [0] * num_blocks
        self.free_list = list(range(num_blocks))
        self.free_count = num_blocks

    def check_id(self, block: int) -> None:
        if block < 0 or block >= self.num_blocks:
            raise IndexError(f"block {block} out of range 0..{self.num_blocks - 1}")

    @property
    def num_free(self) -> int:
        return self.free_count

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.free_count

    def refcount(self, block: int) -> int:
        self.check_id(block)
        return self.refs[block]

    def refcounts(self) -> tuple[int, ...]:
        return tuple(self.refs)

    def free_blocks(self) -> tuple[int, ...]:
        return tuple(self.free_list)

    def allocate(self) -> int:
        if self.free_count == 0:
            raise OutOfBlocks("no free block")
        block = self.free_list.pop(0)
        self.free_count -= 1
        self.refs[block] = 1
        return block

    def take(self, block: int) -> int:
        self.check_id(block)
        if self.refs[block] != 0:
            raise ValueError(f"block {block} is in use")
        self.free_list.remove(block)
        self.refs[block] = 1
        return block

    def incref(self, block: int) -> int:
        self.check_id(block)
        if self.refs[block] == 0:
            raise ValueError(f"block {block} is free")
        self.refs[block] += 1
        return self.refs[block]

    def decref(self, block: int) -> int:
        self.check_id(block)
        if self.refs[block] == 0:
            raise ValueError(f"block {block} is already free")
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.free_list.append(block)
            self.free_count += 1
        return self.refs[block]
