"""Prefix caching by block hash, as vLLM does: a full block is found again by its contents.

Prefix caching is two modules, read in this order: this one (the idea, the operations both
caches offer, and vLLM's hash cache), then ``minipaged.radix_cache`` (SGLang's radix tree, the
same operations over a tree). ``BlockManager(prefix_caching="hash" | "radix")`` picks one.

Source text §5 and §7: requests that share a prefix (a system prompt, earlier turns of a
conversation) can share its KV blocks instead of recomputing them. A *full* block $j$ of a
sequence is identified by a chained hash of its parent's hash and its own $B$ token ids,

$$h_j = \\text{hash}(h_{j-1}, t_{jB}, \\dots, t_{jB+B-1}),$$

so $h_j$ is a function of the tokens $t_0, \\dots, t_{jB+B-1}$ alone: equal hashes mean equal
prefixes up to a collision, whichever physical blocks happen to hold them. A hit is confirmed
by comparing the block's tokens and its parent's hash, never by the hash alone. Only full
blocks are cached: the last, partly filled block of a sequence is still being written.

Because the chain is computed from tokens, a sequence that computed a block itself while the
same contents were already cached in another block still registers the blocks after it, as
vLLM does: they hang under the *contents* of their prefix, not under a block id, so a later
request finds the first copy of the prefix and then these blocks. (The radix cache files them
the same way.)

A cached block stays cached after its last holder lets go ($\\mathcal{R}[p] = 0$): it sits on
the allocator's free list with its contents intact, and is *evicted* only when the allocator
hands it out for new contents. The free list is ordered by release time, so eviction is least
recently used first. A block whose prefix is no longer cached anywhere cannot be reached
until the prefix is cached again, by any block; it is evicted in its turn.

Both caches (this one and ``minipaged.radix_cache.RadixCache``) offer the same operations to
the block manager, ``PrefixCache``: ``match`` (a pure lookup: it never changes the cache),
``insert`` and ``forget``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from minipaged.config import check_setting
from minipaged.python_numbers import python_number


class PrefixCache(Protocol):
    """What the block manager asks of a prefix cache."""

    def __contains__(self, block: int) -> bool: ...
    def cached_blocks(self) -> tuple[int, ...]: ...
    def contents(self) -> object: ...
    def match(self, token_ids: Sequence[int]) -> list[int]: ...
    def insert(self, token_ids: Sequence[int], blocks: Sequence[int]) -> list[int]: ...
    def forget(self, block: int) -> bool: ...


def full_blocks(token_ids: Sequence[int], block_size: int) -> list[tuple[int, ...]]:
    """The token ids of every full block of a sequence, in order (the partial tail dropped)."""
    count = len(token_ids) // block_size
    # np.int64(5) and torch.tensor(5) are token 5, which a tensor's hash (its id) is not
    blocks = (token_ids[j * block_size : (j + 1) * block_size] for j in range(count))
    return [tuple(map(python_number, block)) for block in blocks]


def check_holders(chunks: list[tuple[int, ...]], blocks: Sequence[int]) -> None:
    """Refuse an ``insert`` unless ``blocks`` names a distinct block for each full block of
    its tokens (``chunks``): one block holding two would be cached under both."""
    held = list(blocks[: len(chunks)])
    if len(held) < len(chunks) or len(set(held)) < len(held):
        raise ValueError(
            f"insert needs a distinct block for each of the {len(chunks)} full blocks of "
            f"token_ids, got blocks {list(blocks)[:40]}"
        )


@dataclass(frozen=True, slots=True)
class CachedBlock:
    """What the cache knows of a block: its chained hash $h_j$, the hash $h_{j-1}$ of the
    prefix before it (None for a sequence's first block), and its own $B$ tokens."""

    hash: int
    parent_hash: int | None
    tokens: tuple[int, ...]


class HashPrefixCache:
    """Maps chained block hashes to device blocks.

    Invariant: ``_by_hash[e.hash] == block`` for every ``block -> e`` in ``_entries``; a block
    is registered at most once, and each hash names at most one block (the first to hold
    those contents).
    """

    def __init__(self, block_size: int) -> None:
        self.block_size = check_setting("block_size", block_size)  # np.int64(16) is 16
        self._by_hash: dict[int, int] = {}
        self._entries: dict[int, CachedBlock] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._entries

    def cached_blocks(self) -> tuple[int, ...]:
        return tuple(sorted(self._entries))

    def contents(self) -> tuple[tuple[int, CachedBlock], ...]:
        """Every registered block with its entry, by block id: two caches with equal contents
        answer every lookup alike."""
        return tuple(sorted(self._entries.items()))

    def match(self, token_ids: Sequence[int]) -> list[int]:
        """The cached blocks holding the longest run of ``token_ids``' full blocks, from the
        first block on (each confirmed by its tokens and its parent's hash, not only by its own
        hash). A pure lookup: the cache is left as it was."""
        blocks: list[int] = []
        parent_hash = None
        for tokens in full_blocks(token_ids, self.block_size):
            block_hash = hash((parent_hash, tokens))
            block = self._by_hash.get(block_hash)
            if block is None or not self._holds(block, parent_hash, tokens):
                break  # not cached, or a hash collision: different contents, no hit
            blocks.append(block)
            parent_hash = block_hash
        return blocks

    def insert(self, token_ids: Sequence[int], blocks: Sequence[int]) -> list[int]:
        """Register ``blocks[j]`` as the holder of full block $j$ of ``token_ids``; return the
        blocks newly registered. A block whose contents are already cached under another block
        stays unregistered (the first copy wins), but the chain goes on: the blocks after it
        are registered under the hash of their contents, as in vLLM. The chain stops at a hash
        collision, or at a block already registered for other contents."""
        added: list[int] = []
        parent_hash = None
        chunks = full_blocks(token_ids, self.block_size)
        check_holders(chunks, blocks)
        for tokens, block in zip(chunks, blocks, strict=False):
            block_hash = hash((parent_hash, tokens))
            holder = self._by_hash.get(block_hash)
            if holder is None and block not in self._entries:
                self._by_hash[block_hash] = block
                self._entries[block] = CachedBlock(block_hash, parent_hash, tokens)
                added.append(block)
            elif holder is None or not self._holds(holder, parent_hash, tokens):
                break  # this block holds other contents, or the hash collides
            parent_hash = block_hash
        return added

    def _holds(self, block: int, parent_hash: int | None, tokens: tuple[int, ...]) -> bool:
        """Whether registered ``block`` holds ``tokens`` after the prefix ``parent_hash``."""
        entry = self._entries[block]
        return entry.tokens == tokens and entry.parent_hash == parent_hash

    def forget(self, block: int) -> bool:
        """Drop ``block`` (the allocator is reusing it for new contents); True if it was cached."""
        entry = self._entries.pop(block, None)
        if entry is None:
            return False
        del self._by_hash[entry.hash]
        return True
