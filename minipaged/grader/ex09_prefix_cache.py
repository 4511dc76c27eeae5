"""Checks for exercise 09: prefix caching with a radix tree (source text §7, RadixAttention).

The student's ``radix_cache.py`` mirrors ``minipaged.radix_cache``: ``RadixCache(block_size)``
with ``match``, ``insert``, ``forget``, ``__contains__`` and ``cached_blocks``, in whole blocks
of $B$ tokens. Eviction order (least recently released first) is the allocator's free list; the
cache's part is to forget a reused block and everything below it.
"""

from __future__ import annotations

import random

from minipaged.block_manager import BlockManager
from minipaged.events import PrefixEvict, PrefixHit
from minipaged.grader.report import CheckFailed, Criterion, expect


def block_manager_class(student) -> type[BlockManager]:
    """The library's block manager with the student's tree as its ``"radix"`` prefix cache."""
    radix_cache = student.radix_cache.RadixCache

    class BlockManagerWithYourRadixCache(BlockManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.prefix_cache is not None:
                self.prefix_cache = radix_cache(self.block_size)

    return BlockManagerWithYourRadixCache


class PrefixModel:
    """The radix tree's contract as a dict from each cached prefix (a tuple of blocks' token
    tuples) to the block holding its last chunk."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.blocks: dict[tuple, int] = {}

    def chunks(self, tokens) -> list[tuple]:
        b = self.block_size
        return [tuple(tokens[i * b : (i + 1) * b]) for i in range(len(tokens) // b)]

    def match(self, tokens) -> list[int]:
        chunks, found = self.chunks(tokens), []
        while len(found) < len(chunks) and tuple(chunks[: len(found) + 1]) in self.blocks:
            found.append(self.blocks[tuple(chunks[: len(found) + 1])])
        return found

    def insert(self, tokens, blocks) -> list[int]:
        chunks = self.chunks(tokens)
        new = list(blocks[len(self.match(tokens)) : len(chunks)])
        if not new or set(new) & set(self.blocks.values()):
            return []
        for i in range(len(chunks) - len(new), len(chunks)):
            self.blocks[tuple(chunks[: i + 1])] = blocks[i]
        return new

    def forget(self, block: int) -> bool:
        prefix = next((k for k, v in self.blocks.items() if v == block), None)
        if prefix is None:
            return False
        for key in [k for k in self.blocks if k[: len(prefix)] == prefix]:
            del self.blocks[key]
        return True


def _cache(student, block_size: int = 2):
    return student.radix_cache.RadixCache(block_size)


def check_empty_cache_matches_nothing(student):
    """an empty tree matches no prefix and holds no block"""
    cache = _cache(student)
    expect(cache.match([1, 2, 3, 4]), [], "match([1, 2, 3, 4]) on an empty tree")
    expect(cache.cached_blocks(), (), "cached_blocks() of an empty tree")


def check_insert_caches_full_blocks_only(student):
    """insert caches the full blocks of a sequence; the partly filled last block is left out"""
    cache = _cache(student)
    expect(
        cache.insert([1, 2, 3, 4, 5], [7, 8, 9]),
        [7, 8],
        "insert(tokens=[1, 2, 3, 4, 5], blocks=[7, 8, 9]) with B=2: the blocks newly cached",
    )
    expect(cache.cached_blocks(), (7, 8), "cached_blocks()")
    expect(9 in cache, False, "9 in cache (block 9 holds only token 5 of 2)")
    expect(cache.match([1, 2, 3, 4, 6, 6]), [7, 8], "match([1, 2, 3, 4, 6, 6])")
    expect(cache.match([1, 2, 9, 9]), [7], "match([1, 2, 9, 9]): the longest cached prefix")
    expect(cache.match([2, 1, 3, 4]), [], "match([2, 1, 3, 4]): no prefix in common")


def check_diverging_insert_splits_an_edge(student):
    """a sequence leaving a cached path mid-edge splits the edge; both prefixes stay found"""
    cache = _cache(student)
    cache.insert([1, 2, 3, 4, 5, 6], [0, 1, 2])
    expect(
        cache.insert([1, 2, 3, 4, 7, 7], [0, 1, 5]),
        [5],
        "insert([1, 2, 3, 4, 7, 7], [0, 1, 5]) after [1, 2, 3, 4, 5, 6] -> [0, 1, 2]",
    )
    expect(cache.match([1, 2, 3, 4, 5, 6]), [0, 1, 2], "match of the first sequence")
    expect(cache.match([1, 2, 3, 4, 7, 7]), [0, 1, 5], "match of the second sequence")
    expect(cache.match([1, 2, 8, 8]), [0], "match([1, 2, 8, 8])")


def check_a_block_is_never_cached_twice(student):
    """inserting what is cached adds nothing, and a block cached elsewhere is not added again"""
    cache = _cache(student)
    cache.insert([1, 2, 3, 4], [0, 1])
    expect(cache.insert([1, 2, 3, 4], [0, 1]), [], "inserting the same tokens and blocks again")
    expect(
        cache.insert([5, 6, 7, 8], [2, 1]),
        [],
        "insert([5, 6, 7, 8], [2, 1]) when block 1 already holds [3, 4] after [1, 2]",
    )
    expect(cache.cached_blocks(), (0, 1), "cached_blocks()")


def check_forget_cuts_the_subtree(student):
    """forget(p) drops p and every prefix that runs through it; the prefix before p stays"""
    cache = _cache(student)
    cache.insert([1, 2, 3, 4, 5, 6], [0, 1, 2])
    cache.insert([1, 2, 3, 4, 7, 7], [0, 1, 5])
    expect(cache.forget(1), True, "forget(1) of a cached block")
    expect(cache.cached_blocks(), (0,), "cached_blocks() after forget(1): 2 and 5 ran through 1")
    expect(cache.match([1, 2, 3, 4, 5, 6]), [0], "match([1, 2, 3, 4, 5, 6]) after forget(1)")
    expect(cache.forget(1), False, "forget(1) again")
    expect(cache.forget(0), True, "forget(0)")
    expect(cache.cached_blocks(), (), "cached_blocks() after forgetting the root's child")


def check_random_operations_match_the_contract(student):
    """500 random inserts, matches and forgets give what the prefix contract says"""
    rng = random.Random(9)
    cache, model = _cache(student), PrefixModel(2)
    log, next_block = [], 0
    for _ in range(500):
        tokens = [rng.randint(1, 2) for _ in range(rng.randint(0, 9))]
        op = rng.random()
        if op < 0.4:
            blocks = list(range(next_block, next_block + len(tokens) // 2 + 1))
            if rng.random() < 0.5:  # share the blocks of the cached prefix, as a hit would
                hit = model.match(tokens)
                blocks[: len(hit)] = hit
            next_block += len(blocks)
            log.append(f"insert({tokens}, {blocks})")
            expect(cache.insert(tokens, blocks), model.insert(tokens, blocks), log[-1])
        elif op < 0.8:
            log.append(f"match({tokens})")
            expect(cache.match(tokens), model.match(tokens), log[-1])
        else:
            block = rng.randrange(max(next_block, 1))
            log.append(f"forget({block})")
            expect(cache.forget(block), model.forget(block), log[-1])
        got = tuple(cache.cached_blocks())
        if got != tuple(sorted(model.blocks.values())):
            raise CheckFailed(
                f"cached_blocks() is {got}, expected {tuple(sorted(model.blocks.values()))}, "
                "after:\n  " + "\n  ".join(log[-6:])
            )


def check_block_manager_hits_and_evicts_least_recent_first(student):
    """in the block manager: a finished prompt's blocks are hit, then evicted oldest first"""
    bm = block_manager_class(student)(6, block_size=2, watermark=0.0, prefix_caching="radix")
    prompt = [1, 2, 3, 4, 5]  # full blocks [1, 2] and [3, 4]
    bm.allocate(0, 5, prompt)  # T_0 = [0, 1, 2]
    bm.free(0)  # released last block first: the free list ends 2, 1, 0
    bm.pop_events()
    table = bm.allocate(1, 5, prompt)
    hits = [e for e in bm.pop_events() if isinstance(e, PrefixHit)]
    expect([(e.blocks, e.num_tokens) for e in hits], [((0, 1), 4)], "(blocks, tokens) of the hit")
    expect(table.blocks[:2], [0, 1], "T_1's first two blocks: the cached ones")
    bm.free(1)  # T_1 = [0, 1, 3] released 3, 1, 0: the free list is 4, 5, 2, 3, 1, 0
    bm.allocate(2, 10)  # five fresh blocks: 4, 5, 2, 3, then cached block 1
    evicted = [e.block for e in bm.pop_events() if isinstance(e, PrefixEvict)]
    expect(evicted, [1], "cached blocks evicted to give seq 2 five blocks")
    expect(bm.prefix_cache.cached_blocks(), (0,), "blocks still cached: block 0, released last")
    expect(bm.prefix_cache.match(prompt), [0], "match(prompt) once block 1 is reused")


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_empty_cache_matches_nothing,
        check_insert_caches_full_blocks_only,
        check_diverging_insert_splits_an_edge,
        check_a_block_is_never_cached_twice,
        check_forget_cuts_the_subtree,
        check_random_operations_match_the_contract,
        check_block_manager_hits_and_evicts_least_recent_first,
    )
)
