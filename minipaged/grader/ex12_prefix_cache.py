"""Checks for exercise 12: prefix caching with a radix tree (source text §7, RadixAttention).

The student's ``radix_cache.py`` mirrors ``minipaged.radix_cache``: ``RadixCache(block_size)``
with ``match``, ``insert``, ``forget``, ``__contains__`` and ``cached_blocks``, in whole blocks
of $B$ tokens. Eviction order (least recently released first) is the allocator's free list; the
cache's part is to forget a reused block and everything below it.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from minipaged.block_manager import BlockManager
from minipaged.events import PrefixEvict, PrefixHit
from minipaged.grader.ex12_random_programs import (
    called,
    new_tree,
    random_program,
    run_program,
    shrink,
)
from minipaged.grader.report import CheckFailed, Criterion, expect
from minipaged.grader.shared_state import expect_own_state


def block_manager_class(student) -> type[BlockManager]:
    """The library's block manager with the student's tree as its ``"radix"`` prefix cache."""
    radix_cache = student.radix_cache.RadixCache

    class BlockManagerWithYourRadixCache(BlockManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.prefix_cache is not None:
                self.prefix_cache = radix_cache(self.block_size)

    return BlockManagerWithYourRadixCache


def check_empty_cache_matches_nothing(student):
    """an empty tree matches no prefix and holds no block, and finds a prefix once it holds it"""
    cache = new_tree(student)
    expect(cache.match([1, 2, 3, 4]), [], "match([1, 2, 3, 4]) on an empty tree")
    expect(cache.cached_blocks(), (), "cached_blocks() of an empty tree")
    expect_own_state(
        lambda: new_tree(student),
        lambda first: first.insert([1, 2, 3, 4], [5, 6]),
        lambda second: (second.cached_blocks(), second.match([1, 2, 3, 4])),
        "(cached_blocks(), match([1, 2, 3, 4])) of a second tree after insert([1, 2, 3, 4], "
        "[5, 6]) into the first",
    )
    cache = new_tree(student)  # a tree that never caches would match nothing, too
    cache.insert([1, 2, 3, 4], [5, 6])
    expect(
        cache.match([1, 2, 3, 4]), [5, 6], "match([1, 2, 3, 4]) after insert([1, 2, 3, 4], [5, 6])"
    )


def check_token_ids_of_a_tensor_are_token_ids(student):
    """a block's key is its tuple of token ids as ints: tokens given as a tensor or an array
    match the same tokens given as a list, either way round"""
    tokens = [1, 2, 3, 4]
    for kind, as_kind in (
        ("torch.tensor", torch.tensor),
        ("np.array", lambda ids: np.array(ids, dtype=np.int64)),
    ):
        given = f"{kind}({tokens})"
        for inserted, matched in ((given, str(tokens)), (str(tokens), given)):
            cache = new_tree(student)
            cache.insert(as_kind(tokens) if inserted == given else tokens, [5, 6])
            got = cache.match(as_kind(tokens) if matched == given else tokens)
            if got != [5, 6]:
                raise CheckFailed(
                    f"insert({inserted}, [5, 6]) then match({matched}): expected [5, 6], got "
                    f"{got!r}. An item of a tensor hashes by its identity, not its value: turn "
                    "each token id into an int (int(t)) before it becomes part of a block's key"
                )


def check_insert_caches_full_blocks_only(student):
    """insert caches the full blocks of a sequence; the partly filled last block is left out"""
    cache = new_tree(student)
    expect(
        cache.insert([1, 2, 3, 4, 5], [7, 8, 9]),
        [7, 8],
        "insert(tokens=[1, 2, 3, 4, 5], blocks=[7, 8, 9]) with B=2: the blocks newly cached",
    )
    expect(cache.cached_blocks(), (7, 8), "cached_blocks()")
    expect(
        9 in cache,
        False,
        "9 in cache (__contains__(9)) after that insert: block 9 holds only token 5 of 2",
    )
    expect(cache.match([1, 2, 3, 4, 6, 6]), [7, 8], "match([1, 2, 3, 4, 6, 6])")
    expect(cache.match([1, 2, 9, 9]), [7], "match([1, 2, 9, 9]): the longest cached prefix")
    expect(cache.match([2, 1, 3, 4]), [], "match([2, 1, 3, 4]): no prefix in common")


def check_diverging_insert_splits_an_edge(student):
    """a sequence leaving a cached path mid-edge splits the edge; both prefixes stay found"""
    cache = new_tree(student)
    cache.insert([1, 2, 3, 4, 5, 6], [0, 1, 2])
    expect(
        cache.insert([1, 2, 3, 4, 7, 7], [0, 1, 5]),
        [5],
        "insert([1, 2, 3, 4, 7, 7], [0, 1, 5]) after [1, 2, 3, 4, 5, 6] -> [0, 1, 2]",
    )
    both = [("insert", [1, 2, 3, 4, 5, 6], [0, 1, 2]), ("insert", [1, 2, 3, 4, 7, 7], [0, 1, 5])]
    failure, _ = run_program(student, both)  # block 5 must hang after [1, 2], [3, 4] only
    if failure:
        raise CheckFailed(failure)
    expect(
        cache.match([1, 2, 3, 4, 5, 6]), [0, 1, 2], "match([1, 2, 3, 4, 5, 6]) after both inserts"
    )
    expect(
        cache.match([1, 2, 3, 4, 7, 7]), [0, 1, 5], "match([1, 2, 3, 4, 7, 7]) after both inserts"
    )
    expect(cache.match([1, 2, 8, 8]), [0], "match([1, 2, 8, 8])")


def check_a_block_is_never_cached_twice(student):
    """inserting what is cached adds nothing, and a block cached elsewhere is not added again"""
    cache = new_tree(student)
    cache.insert([1, 2, 3, 4], [0, 1])
    expect(
        cache.insert([1, 2, 3, 4], [0, 1]),
        [],
        "insert([1, 2, 3, 4], [0, 1]) again: the same tokens and blocks",
    )
    expect(
        cache.insert([5, 6, 7, 8], [2, 1]),
        [],
        "insert([5, 6, 7, 8], [2, 1]) when block 1 already holds [3, 4] after [1, 2]",
    )
    expect(cache.cached_blocks(), (0, 1), "cached_blocks()")


def check_forget_cuts_the_subtree(student):
    """forget(p) drops p and every prefix that runs through it; the prefix before p stays"""
    cache = new_tree(student)
    cache.insert([1, 2, 3, 4, 5, 6], [0, 1, 2])
    cache.insert([1, 2, 3, 4, 7, 7], [0, 1, 5])
    expect(
        cache.forget(1),
        True,
        "forget(1) of a cached block (the allocator has handed block 1 out again: forget may "
        "not refuse it, even with prefixes below it, or a later hit shares its new contents)",
    )
    left = cache.cached_blocks()
    if 0 not in left:
        raise CheckFailed(
            f"cached_blocks() after forget(1) is {left}: block 0, before block 1 on its edge, "
            "went too. Keep the prefix before p: it is still valid, and running sequences "
            "hold its blocks; cut the edge at p"
        )
    expect(left, (0,), "cached_blocks() after forget(1): 2 and 5 ran through 1")
    expect(cache.match([1, 2, 3, 4, 5, 6]), [0], "match([1, 2, 3, 4, 5, 6]) after forget(1)")
    expect(
        cache.match([1, 2, 5, 6]),
        [0],
        "match([1, 2, 5, 6]) after forget(1): block 2 hung below block 1, so it went with it "
        "(leave no child under a shortened edge: it would be found after [1, 2])",
    )
    expect(cache.forget(1), False, "forget(1) again")
    expect(cache.forget(0), True, "forget(0)")
    expect(cache.cached_blocks(), (), "cached_blocks() after forgetting the root's child")


SEED = 9
"""The program every grading runs first: the same at each, so that a tree's bug is reported
with the same shortest program each time (seed 9's 500 operations catch every bug of the
tests' zoo of trees; a drawn program missed a stale parent pointer about one time in four)."""

SEED_BLOCK_SIZE = 2
"""The fixed program's $B$, which every other check of exercise 12 uses too."""

DRAWN_BLOCK_SIZES = (3, 4, 5)
"""The $B$ of the drawn program, one of these at each grading: never the fixed program's 2, so
that a tree cutting chunks of 2 whatever its ``block_size`` (or assuming $B$ divides something)
fails at every grading, not one time in four."""

SEED_TOKEN_IDS = (1, 2)
"""The fixed program's two token ids, which every other check of exercise 12 keeps small too."""

PAST_16_BITS = 2**16
"""How far apart the drawn program's two token ids are: one below 256, the other past
$2^{16}$ (a Llama-3 vocabulary's ids reach 128,255), equal in their low 16 bits. A tree that
holds a token in a byte or in 16 bits (``bytes(chunk)``, a ``uint8`` or ``int16`` array) then
fails at every grading, with an error or by taking the two for one; tokens 1 and 2 let it pass."""

_DRAWS = random.SystemRandom()
"""The seed, $B$ and token ids of the program each grading runs next, from the system's random
source: with the fixed program alone, a tree replaying the library's answers to it, stored at
home, passed, and so did a tree that ignored ``block_size``."""


def check_random_operations_match_the_contract(student):
    """random inserts, matches and forgets (500 the same at every grading with B=2 over tokens
    1 and 2, then 500 drawn anew with a B drawn from 3 to 5 over two token ids, one past 2**16)
    give what the contract says, and keep the tree sound: no empty edge below the root, parent
    pointers that agree with the children

    Rule: after every operation, match(tokens) gives the blocks of the longest cached prefix
    of whole blocks of B tokens, insert the blocks it newly caches, forget(p) whether p was
    cached, as a dict from each cached prefix to its block would."""
    seed, block_size, low = (
        _DRAWS.randrange(2**32),
        _DRAWS.choice(DRAWN_BLOCK_SIZES),
        _DRAWS.randrange(256),
    )
    drawn = (seed, block_size, (low, low + PAST_16_BITS))
    for seed, block_size, token_ids in ((SEED, SEED_BLOCK_SIZE, SEED_TOKEN_IDS), drawn):
        program = random_program(seed, block_size=block_size, token_ids=token_ids)
        failure, ran = run_program(student, program, block_size)
        if failure:
            short, failure = shrink(student, program[:ran], failure, block_size)
            steps = "\n  ".join(f"cache.{called(op)}" for op in short)
            made = f"random_program(seed={seed}, block_size={block_size})"
            if seed != SEED:
                made = f"{made[:-1]}, token_ids={token_ids}), drawn for this grading"
            raise CheckFailed(
                f"{failure}\nThe shortest failing program found ({len(short)} of the "
                f"{len(program)} random operations of {made}, in "
                f"minipaged.grader.ex12_random_programs), on a new "
                f"RadixCache(block_size={block_size}):\n  {steps}"
            )


def _allocate_checking_hits(bm, seq: int, prompt: list[int], held: dict[int, list]) -> list:
    """``bm.allocate(seq, len(prompt), prompt)``; fail, naming the cause, when its PrefixHit
    shares a block that does not hold the prompt's own tokens there. ``held`` maps each block
    to the tokens last written in it (updated here); returns the PrefixHits as (blocks,
    tokens)."""
    b = bm.block_size
    bm.pop_events()
    table = bm.allocate(seq, len(prompt), prompt)
    hits = [(e.blocks, e.num_tokens) for e in bm.pop_events() if isinstance(e, PrefixHit)]
    for blocks, _ in hits:
        for j, block in enumerate(blocks):
            own = prompt[j * b : (j + 1) * b]
            if held.get(block) != own:
                raise CheckFailed(
                    f"allocate({seq}, {len(prompt)}, {prompt}) hit blocks {list(blocks)}, but "
                    f"block {block} holds tokens {held.get(block)}, where the prompt has {own}: "
                    "a hit shares the blocks of another prefix of the same length. Compare "
                    "every chunk along an edge with the prompt's, not only the first (the key)"
                )
    for j, block in enumerate(table.blocks):
        held[block] = prompt[j * b : (j + 1) * b]
    return hits


def _check_hits_hold_the_prompt(student) -> None:
    """Two prompts of the same length sharing their first block: each hit must share the
    blocks that hold its own prompt's tokens, not the other's."""
    bm = block_manager_class(student)(8, block_size=2, watermark=0.0, prefix_caching="radix")
    first, second, held = [1, 2, 3, 4, 5], [1, 2, 8, 9, 5], {}
    _allocate_checking_hits(bm, 0, first, held)  # T_0 = [0, 1, 2]
    bm.free(0)
    what = "(blocks, tokens) of the PrefixHit of allocate({}, 5, {}), after {}"
    hits = _allocate_checking_hits(bm, 1, second, held)
    expect(hits, [((0,), 2)], what.format(1, second, f"{first} was cached in [0, 1, 2]"))
    t_1 = bm.table(1).blocks
    bm.free(1)
    hits = _allocate_checking_hits(bm, 2, second, held)
    expect(hits, [(tuple(t_1[:2]), 4)], what.format(2, second, f"it was cached in {t_1}"))
    hits = _allocate_checking_hits(bm, 3, first, held)
    expect(hits, [((0, 1), 4)], what.format(3, first, f"{second} was cached in {t_1}"))


def check_block_manager_hits_and_evicts_least_recent_first(student):
    """in the block manager: a finished prompt's blocks are hit, holding the prompt's own
    tokens, then evicted oldest first

    Rule: a new prompt reuses the cached blocks match finds, which hold its own tokens; a
    cached block is evicted only when the allocator hands it out again, least recently
    released first, and forget drops it with every prefix below it."""
    _check_hits_hold_the_prompt(student)
    bm = block_manager_class(student)(6, block_size=2, watermark=0.0, prefix_caching="radix")
    prompt = [1, 2, 3, 4, 5]  # full blocks [1, 2] and [3, 4]
    bm.allocate(0, 5, prompt)  # T_0 = [0, 1, 2]
    bm.free(0)  # released last block first: the free list ends 2, 1, 0
    bm.pop_events()
    table = bm.allocate(1, 5, prompt)
    hits = [e for e in bm.pop_events() if isinstance(e, PrefixHit)]
    expect(
        [(e.blocks, e.num_tokens) for e in hits],
        [((0, 1), 4)],
        "(blocks, tokens) of the PrefixHit of allocate(1, 5, prompt) after free(0)",
    )
    expect(table.blocks[:2], [0, 1], "T_1[:2] after allocate(1, 5, prompt): the cached blocks")
    bm.free(1)  # T_1 = [0, 1, 3] released 3, 1, 0: the free list is 4, 5, 2, 3, 1, 0
    bm.allocate(2, 10)  # five fresh blocks: 4, 5, 2, 3, then cached block 1
    evicted = [e.block for e in bm.pop_events() if isinstance(e, PrefixEvict)]
    expect(evicted, [1], "blocks evicted by allocate(2, 10), which takes five blocks")
    expect(
        bm.prefix_cache.cached_blocks(),
        (0,),
        "cached_blocks() after allocate(2, 10): block 0, released last",
    )
    expect(bm.prefix_cache.match(prompt), [0], "match(prompt) once block 1 is reused")


CRITERIA = tuple(
    Criterion(check)
    for check in (
        check_empty_cache_matches_nothing,
        check_insert_caches_full_blocks_only,
        check_token_ids_of_a_tensor_are_token_ids,
        check_diverging_insert_splits_an_edge,
        check_a_block_is_never_cached_twice,
        check_forget_cuts_the_subtree,
        check_random_operations_match_the_contract,
        check_block_manager_hits_and_evicts_least_recent_first,
    )
)
