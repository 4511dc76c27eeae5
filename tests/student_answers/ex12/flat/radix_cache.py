"""Every chunk hung under the root: a block matches after any prefix, not only its own.

Fails: random_operations_match_the_contract
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from minipaged.prefix_cache import full_blocks

Chunk = tuple[int, ...]


@dataclass(eq=False)
class RadixNode:
    chunks: list[Chunk]
    blocks: list[int]
    parent: RadixNode | None = None
    children: dict[Chunk, RadixNode] = field(default_factory=dict)


class RadixCache:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.root = RadixNode([], [])
        self._node_of: dict[int, RadixNode] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._node_of

    def cached_blocks(self) -> tuple[int, ...]:
        return tuple(sorted(self._node_of))

    def _path(self, chunks):
        """The nodes matching chunks from the root, one per chunk."""
        node, path = self.root, []
        for chunk in chunks:
            node = self.root.children.get(chunk)
            if node is None:
                break
            path.append(node)
        return path

    def match(self, token_ids: Sequence[int]) -> list[int]:
        return [n.blocks[0] for n in self._path(full_blocks(token_ids, self.block_size))]

    def insert(self, token_ids: Sequence[int], blocks: Sequence[int]) -> list[int]:
        chunks = full_blocks(token_ids, self.block_size)
        path = self._path(chunks)
        new_blocks = list(blocks[len(path) : len(chunks)])
        if not new_blocks or any(b in self._node_of for b in new_blocks):
            return []
        node = path[-1] if path else self.root
        for chunk, block in zip(chunks[len(path) :], new_blocks):
            child = RadixNode([chunk], [block], parent=self.root)
            self.root.children[chunk] = child
            self._node_of[block] = child
            node = child
        return new_blocks

    def forget(self, block: int) -> bool:
        node = self._node_of.get(block)
        if node is None:
            return False
        del node.parent.children[node.chunks[0]]
        stack = [node]
        while stack:
            n = stack.pop()
            for b in n.blocks:
                del self._node_of[b]
            stack.extend(n.children.values())
        return True
