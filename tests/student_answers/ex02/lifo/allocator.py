"""A freed block pushed on the front of the free list: a stack, not first-in first-out.

Fails: freed_blocks_join_the_back_of_the_free_list
"""

from __future__ import annotations

from collections import deque


class OutOfBlocks(RuntimeError):
    """The pool has no free block left."""


class BlockAllocator:
    def __init__(self, num_blocks: int, pool: str = "device") -> None:
        self.pool = pool
        self.num_blocks = num_blocks
        self._counts = {p: 0 for p in range(num_blocks)}
        self._queue = deque(range(num_blocks))

    def _valid(self, block):
        if not (0 <= block < self.num_blocks):
            raise IndexError(f"{self.pool} block {block} not in 0..{self.num_blocks - 1}")

    @property
    def num_free(self) -> int:
        return len(self._queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def refcount(self, block: int) -> int:
        self._valid(block)
        return self._counts[block]

    def refcounts(self) -> tuple[int, ...]:
        return tuple(self.refcount(p) for p in range(self.num_blocks))

    def free_blocks(self) -> tuple[int, ...]:
        return tuple(self._queue)

    def allocate(self) -> int:
        if not self._queue:
            raise OutOfBlocks(f"no free {self.pool} block")
        block = self._queue.popleft()
        self._counts[block] = 1
        return block

    def take(self, block: int) -> int:
        self._valid(block)
        if self._counts[block]:
            raise ValueError(f"block {block} is in use")
        self._queue.remove(block)
        self._counts[block] = 1
        return block

    def incref(self, block: int) -> int:
        self._valid(block)
        if self._counts[block] == 0:
            raise ValueError(f"block {block} is free, cannot share it")
        self._counts[block] += 1
        return self._counts[block]

    def decref(self, block: int) -> int:
        self._valid(block)
        if self._counts[block] == 0:
            raise ValueError(f"double free of block {block}")
        self._counts[block] -= 1
        if self._counts[block] == 0:
            self._queue.appendleft(block)
        return self._counts[block]
