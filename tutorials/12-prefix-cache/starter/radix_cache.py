"""Exercise 12: prefix caching with a radix tree (source text §7, RadixAttention).

Fill in the regions marked ``# --- your code here ---``, then run

    minipaged exercises check 12

The names and signatures are those of ``minipaged.radix_cache``; the last check plugs your tree
into the library's block manager. The tree works in whole blocks: a *chunk* is the B token ids
of one full block, an edge holds a run of chunks and the blocks that hold them, and the path
from the root to a node spells a cached prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from minipaged.prefix_cache import full_blocks

Chunk = tuple[int, ...]  # the B token ids of one block


@dataclass(eq=False)
class RadixNode:
    """The edge into this node: ``chunks[i]`` are the tokens held by ``blocks[i]``."""

    chunks: list[Chunk]
    blocks: list[int]
    parent: RadixNode | None = None
    children: dict[Chunk, RadixNode] = field(default_factory=dict)  # keyed by first chunk


class RadixCache:
    """Keep: every cached block is on exactly one edge (``_node_of``); a child is keyed by its
    first chunk; no edge but the root's is empty."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.root = RadixNode([], [])
        self._node_of: dict[int, RadixNode] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._node_of

    def cached_blocks(self) -> tuple[int, ...]:
        return tuple(sorted(self._node_of))

    def match(self, token_ids: Sequence[int]) -> list[int]:
        """The blocks of the longest cached prefix of ``token_ids``' full blocks
        (``full_blocks(token_ids, B)`` gives their chunks)."""
        # --- your code here (about 12 lines) ---
        raise NotImplementedError("exercise 12: walk the tree chunk by chunk")

    def insert(self, token_ids: Sequence[int], blocks: Sequence[int]) -> list[int]:
        """Cache the full blocks of ``token_ids``, held by ``blocks``, below their longest
        cached prefix, and return the blocks newly cached. Where the walk leaves an edge
        partway, split the edge there. Add nothing (return []) when nothing is new or when a
        new block is already cached elsewhere."""
        # --- your code here (about 20 lines) ---
        raise NotImplementedError("exercise 12: walk, split, add a child")

    def forget(self, block: int) -> bool:
        """The allocator reuses ``block``: drop it, the rest of its edge, and the subtree below
        (those prefixes can no longer be reached). Return True if it was cached."""
        # --- your code here (about 15 lines) ---
        raise NotImplementedError("exercise 12: cut the tree below the block")
