"""Prefix caching with a radix tree, as SGLang's RadixAttention does (source text §7).

The second of prefix caching's two modules: read ``minipaged.prefix_cache`` first (the idea,
the ``PrefixCache`` operations this tree offers too, and vLLM's hash cache it is set against).

The tree's edges are labelled with runs of tokens and hold the KV blocks of those tokens; the
path from the root to a node spells a cached prefix. Where the hash cache
(``minipaged.prefix_cache``) finds block $j$ by hashing the $j$ blocks before it, the tree
walks the prefix once, and it can share a prefix between any requests that have it, whatever
physical block first held each part.

Here the tree works in whole blocks of $B$ tokens: an edge holds $k$ blocks and $kB$ tokens
(SGLang's tree is token-grained, with a page size of 1). Inserting a sequence whose path leaves
an edge partway *splits* the edge at that block boundary; a lookup (``match``) never does: it
only reads the tree.

Locks and eviction: SGLang counts the running requests on each node (a lock) and evicts
unlocked leaves, least recently used first. Here the lock is the block's refcount
$\\mathcal{R}[p] > 0$, and eviction order is the allocator's free list, ordered by release
time; sequences release their last block first, so a block is always evicted before its parent:
leaves first, least recently released first. When the allocator reuses a block, ``forget``
cuts the tree below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from minipaged.config import check_setting
from minipaged.prefix_cache import check_holders, full_blocks

Chunk = tuple[int, ...]  # the B token ids of one block
Tree = tuple[tuple[tuple[Chunk, ...], tuple[int, ...], "Tree"], ...]


@dataclass(eq=False, slots=True)
class RadixNode:
    """An edge into this node: ``chunks[i]`` are the tokens held by ``blocks[i]``."""

    chunks: list[Chunk]
    blocks: list[int]
    parent: RadixNode | None = None
    children: dict[Chunk, RadixNode] = field(default_factory=dict)  # keyed by first chunk


class RadixCache:
    """Invariants: every cached block is on exactly one edge (``_node_of``); a child's key is
    its first chunk; no edge is empty except the root's."""

    def __init__(self, block_size: int) -> None:
        self.block_size = check_setting("block_size", block_size)  # np.int64(16) is 16
        self.root = RadixNode([], [])
        self._node_of: dict[int, RadixNode] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._node_of

    def cached_blocks(self) -> tuple[int, ...]:
        return tuple(sorted(self._node_of))

    def contents(self) -> Tree:
        """The whole tree as nested tuples (each child: its chunks, its blocks, its subtree),
        children in key order: two caches with equal contents answer every lookup alike."""
        return _contents(self.root)

    def match(self, token_ids: Sequence[int]) -> list[int]:
        """``match_prefix``: the blocks of the longest cached prefix of ``token_ids``' full
        blocks. A pure lookup: the tree is left as it was."""
        return self._walk(full_blocks(token_ids, self.block_size))[2]

    def insert(self, token_ids: Sequence[int], blocks: Sequence[int]) -> list[int]:
        """Add the full blocks of ``token_ids``, held by ``blocks``, below their longest cached
        prefix; return the blocks newly cached. Where the walk leaves an edge partway, the edge
        is split. A block already cached elsewhere is never added twice."""
        chunks = full_blocks(token_ids, self.block_size)
        check_holders(chunks, blocks)
        node, k, matched = self._walk(chunks)
        rest = chunks[len(matched) :]
        new_blocks = list(blocks[len(matched) : len(chunks)])
        if any(block in self._node_of for block in new_blocks) or not rest:
            return []
        if k < len(node.blocks):  # the path leaves node's edge after k blocks: split it there
            self._split(node, k)
        child = RadixNode(list(rest), new_blocks, parent=node)
        node.children[rest[0]] = child
        for block in new_blocks:
            self._node_of[block] = child
        return new_blocks

    def forget(self, block: int) -> bool:
        """The allocator reuses ``block``: drop it, the rest of its edge, and the subtree below
        (those prefixes can no longer be reached). True if it was cached."""
        node = self._node_of.get(block)
        if node is None:
            return False
        i = node.blocks.index(block)
        for child in list(node.children.values()):
            self._drop(child)
        node.children.clear()
        for gone in node.blocks[i:]:
            del self._node_of[gone]
        del node.blocks[i:], node.chunks[i:]
        if not node.blocks:  # an empty edge: remove the node itself
            del node.parent.children[next(k for k, v in node.parent.children.items() if v is node)]
        return True

    def _walk(self, chunks: list[Chunk]) -> tuple[RadixNode, int, list[int]]:
        """Follow ``chunks`` from the root, changing nothing: the last node entered, how many
        blocks of its edge matched (all of them, or fewer where the path leaves the edge
        partway), and the blocks matched in all."""
        node, k, matched = self.root, 0, []
        while len(matched) < len(chunks) and chunks[len(matched)] in node.children:
            node = node.children[chunks[len(matched)]]
            k = 0
            while (
                k < len(node.blocks)
                and len(matched) < len(chunks)
                and node.chunks[k] == chunks[len(matched)]
            ):
                matched.append(node.blocks[k])
                k += 1
            if k < len(node.blocks):
                break
        return node, k, matched

    def _split(self, node: RadixNode, k: int) -> None:
        """Keep the first ``k`` blocks on ``node``'s edge; move the rest into a new child."""
        tail = RadixNode(node.chunks[k:], node.blocks[k:], parent=node, children=node.children)
        for child in tail.children.values():
            child.parent = tail
        for block in tail.blocks:
            self._node_of[block] = tail
        node.chunks, node.blocks = node.chunks[:k], node.blocks[:k]
        node.children = {tail.chunks[0]: tail}

    def _drop(self, node: RadixNode) -> None:
        for child in node.children.values():
            self._drop(child)
        for block in node.blocks:
            del self._node_of[block]


def _contents(node: RadixNode) -> Tree:
    return tuple(
        (tuple(child.chunks), tuple(child.blocks), _contents(child))
        for _, child in sorted(node.children.items())
    )
