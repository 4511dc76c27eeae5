"""Checks for exercise 12: prefix caching with a radix tree (source text §7, RadixAttention).

The student's ``radix_cache.py`` mirrors ``minipaged.radix_cache``: ``RadixCache(block_size)``
with ``match``, ``insert``, ``forget``, ``__contains__`` and ``cached_blocks``, in whole blocks
of $B$ tokens. Eviction order (least recently released first) is the allocator's free list; the
cache's part is to forget a reused block and everything below it.
"""

from __future__ import annotations

import copy
import random

from minipaged.block_manager import BlockManager
from minipaged.events import PrefixEvict, PrefixHit
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
    """an empty tree matches no prefix and holds no block, and finds a prefix once it holds it"""
    cache = _cache(student)
    expect(cache.match([1, 2, 3, 4]), [], "match([1, 2, 3, 4]) on an empty tree")
    expect(cache.cached_blocks(), (), "cached_blocks() of an empty tree")
    expect_own_state(
        lambda: _cache(student),
        lambda first: first.insert([1, 2, 3, 4], [5, 6]),
        lambda second: (second.cached_blocks(), second.match([1, 2, 3, 4])),
        "(cached_blocks(), match([1, 2, 3, 4])) of a second tree after insert([1, 2, 3, 4], "
        "[5, 6]) into the first",
    )
    cache = _cache(student)  # a tree that never caches would match nothing, too
    cache.insert([1, 2, 3, 4], [5, 6])
    expect(
        cache.match([1, 2, 3, 4]), [5, 6], "match([1, 2, 3, 4]) after insert([1, 2, 3, 4], [5, 6])"
    )


def check_insert_caches_full_blocks_only(student):
    """insert caches the full blocks of a sequence; the partly filled last block is left out"""
    cache = _cache(student)
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
    cache = _cache(student)
    cache.insert([1, 2, 3, 4, 5, 6], [0, 1, 2])
    expect(
        cache.insert([1, 2, 3, 4, 7, 7], [0, 1, 5]),
        [5],
        "insert([1, 2, 3, 4, 7, 7], [0, 1, 5]) after [1, 2, 3, 4, 5, 6] -> [0, 1, 2]",
    )
    expect(
        cache.match([1, 2, 3, 4, 5, 6]), [0, 1, 2], "match([1, 2, 3, 4, 5, 6]) after both inserts"
    )
    expect(
        cache.match([1, 2, 3, 4, 7, 7]), [0, 1, 5], "match([1, 2, 3, 4, 7, 7]) after both inserts"
    )
    expect(cache.match([1, 2, 8, 8]), [0], "match([1, 2, 8, 8])")


def check_a_block_is_never_cached_twice(student):
    """inserting what is cached adds nothing, and a block cached elsewhere is not added again"""
    cache = _cache(student)
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
    cache = _cache(student)
    cache.insert([1, 2, 3, 4, 5, 6], [0, 1, 2])
    cache.insert([1, 2, 3, 4, 7, 7], [0, 1, 5])
    expect(cache.forget(1), True, "forget(1) of a cached block")
    expect(cache.cached_blocks(), (0,), "cached_blocks() after forget(1): 2 and 5 ran through 1")
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


MAX_NODES = 10_000
"""A walk of the student's tree stops here: a cycle (a node among its own descendants) or a
tree far larger than any program here builds."""


def tree_shape(cache) -> list[list]:
    """The student's tree as plain lists, walking it from ``cache.root``: for every edge below
    the root, ``[path, key, chunks, blocks, parent_ok]``: the first chunks on the way to it,
    its key, chunks and blocks, and whether its node's ``parent`` is the node whose
    ``children`` hold it. Runs next to the student's code."""
    shape, stack = [], [(cache.root, [])]
    while stack:
        node, path = stack.pop()
        for key, child in node.children.items():
            chunks = [list(c) for c in child.chunks]
            shape.append([path, list(key), chunks, list(child.blocks), child.parent is node])
            if len(shape) > MAX_NODES:
                return shape
            stack.append((child, path + chunks[:1]))
    return shape


def tree_problems(shape: list[list], cached: tuple) -> list[str]:
    """What is wrong with the tree's own shape: every non-root edge holds at least one block,
    with one chunk per block; every child's ``parent`` is the node whose ``children`` hold it,
    under the key of its first chunk; and the blocks on the edges are exactly
    ``cached_blocks()``."""
    if len(shape) > MAX_NODES:
        return [f"the tree has more than {MAX_NODES} nodes: does a node hold itself below it?"]
    problems, on_edges = [], []
    for path, key, chunks, blocks, parent_ok in shape:
        if not blocks:
            problems.append(f"the edge after {path} is empty: remove an emptied node")
        if len(chunks) != len(blocks):
            problems.append(
                f"the edge after {path} has {len(chunks)} chunks but {len(blocks)} blocks "
                f"{blocks}: one block per chunk"
            )
        if not parent_ok:
            problems.append(
                f"the node of blocks {blocks} (after {path}) has a parent other than the node "
                "whose children hold it: set child.parent when you split or move a node"
            )
        if chunks and key != chunks[0]:
            problems.append(
                f"the node of blocks {blocks} is a child under key {key}, but its first chunk "
                f"is {chunks[0]}"
            )
        on_edges += blocks
    if tuple(sorted(on_edges)) != tuple(cached):
        problems.append(
            f"the edges hold blocks {sorted(on_edges)}, but cached_blocks() is {list(cached)}"
        )
    return problems


def random_program(seed: int, length: int = 500) -> list[tuple]:
    """``length`` random operations, each ``("insert", tokens, blocks)``, ``("match", tokens)``
    or ``("forget", block)``, over tokens 1 and 2 so that prefixes collide and edges split.
    Half the inserts reuse the blocks of the cached prefix, as a prefix hit would. The same
    ``seed`` gives the same program."""
    rng, model, program, next_block = random.Random(seed), PrefixModel(2), [], 0
    for _ in range(length):
        tokens = [rng.randint(1, 2) for _ in range(rng.randint(0, 9))]
        op = rng.random()
        if op < 0.4:
            blocks = list(range(next_block, next_block + len(tokens) // 2 + 1))
            if rng.random() < 0.5:
                hit = model.match(tokens)
                blocks[: len(hit)] = hit
            next_block += len(blocks)
            program.append(("insert", tokens, blocks))
            model.insert(tokens, blocks)
        elif op < 0.8:
            program.append(("match", tokens))
        else:
            block = rng.randrange(max(next_block, 1))
            program.append(("forget", block))
            model.forget(block)
    return program


def _call(op: tuple) -> str:
    return f"{op[0]}({', '.join(map(repr, op[1:]))})"


def _run_ops(student, program: list[tuple]) -> list[dict]:
    """Next to the student's code: run ``program`` on a fresh tree of theirs, and after each
    operation record what it returned (or raised), the tree's shape and ``cached_blocks()``.
    Stops at the first exception."""
    cache, seen = _cache(student), []
    for op in program:
        try:
            got = getattr(cache, op[0])(*op[1:])
        except NotImplementedError:
            raise
        except Exception as error:
            seen.append({"raised": f"{type(error).__name__}: {error}{student.where(error)}"})
            break
        got = copy.deepcopy(got)  # as it was now: a later operation may change the list
        seen.append({"got": got, "tree": tree_shape(cache), "cached": list(cache.cached_blocks())})
    return seen


def run_program(student, program: list[tuple]) -> tuple[str, int]:
    """Run ``program`` on a fresh tree of the student's and on the contract's model; return
    what first went wrong (a wrong answer, a broken tree, an exception), or ``""``, and how
    many operations ran up to it."""
    model, tree_before = PrefixModel(2), []
    seen = student.run(_run_ops, program)
    for ran, (op, step) in enumerate(zip(program, seen, strict=False), start=1):
        if "raised" in step:
            return f"{_call(op)} raised {step['raised']}", ran
        got, expected = step["got"], getattr(model, op[0])(*op[1:])
        if got != expected:
            return f"{_call(op)} returned {got!r}, expected {expected!r}", ran
        if op[0] == "match" and step["tree"] != tree_before:
            return (
                f"{_call(op)} changed the tree: match is a pure lookup (the block manager "
                "calls it to ask, before it decides anything), so it splits no edge",
                ran,
            )
        tree_before = step["tree"]
        problems = tree_problems(step["tree"], step["cached"])
        if problems:
            return f"after {_call(op)} the tree is broken: " + "; ".join(problems[:2]), ran
        blocks = tuple(sorted(model.blocks.values()))
        if tuple(step["cached"]) != blocks:
            return f"after {_call(op)}, cached_blocks() is {step['cached']}, expected {blocks}", ran
    if len(seen) < len(program):
        return "your tree answered fewer operations than it was given", len(seen) + 1
    return "", len(program)


SHRINK_RUNS = 500
"""How many shorter programs ``shrink`` may try: a count, not a time, so that the program a
student sees does not depend on how busy the machine is."""


def shrink(student, program: list[tuple], failure: str) -> tuple[list[tuple], str]:
    """A shorter program that still fails, and its failure: drop runs of operations, halving
    the run's length, for as long as something fails (delta debugging), trying at most
    ``SHRINK_RUNS`` programs."""
    runs, size = 0, max(len(program) // 2, 1)
    while size >= 1 and runs < SHRINK_RUNS:
        i, dropped = 0, False
        while i < len(program) and runs < SHRINK_RUNS:
            candidate = program[:i] + program[i + size :]
            why, ran = run_program(student, candidate) if candidate else ("", 0)
            runs += 1
            if why:
                program, failure, dropped = candidate[:ran], why, True
            else:
                i += size
        if not dropped:
            size //= 2
    return program, failure


SEED = 9
"""The program every grading runs first: the same at each, so that a tree's bug is reported
with the same shortest program each time (seed 9's 500 operations catch every bug of the
tests' zoo of trees; a drawn program missed a stale parent pointer about one time in four)."""

_DRAWS = random.SystemRandom()
"""The seed of the program each grading runs next, from the system's random source: with the
fixed program alone, a tree replaying the library's answers to it, stored at home, passed."""


def check_random_operations_match_the_contract(student):
    """random inserts, matches and forgets (500 the same at every grading, then 500 drawn anew)
    give what the contract says, and keep the tree sound: no empty edge below the root, parent
    pointers that agree with the children

    Rule: after every operation, match(tokens) gives the blocks of the longest cached prefix
    of whole blocks, insert the blocks it newly caches, forget(p) whether p was cached, as a
    dict from each cached prefix to its block would."""
    for seed in (SEED, _DRAWS.randrange(2**32)):
        program = random_program(seed)
        failure, ran = run_program(student, program)
        if failure:
            short, failure = shrink(student, program[:ran], failure)
            steps = "\n  ".join(f"cache.{_call(op)}" for op in short)
            drawn = "" if seed == SEED else ", drawn for this grading"
            raise CheckFailed(
                f"{failure}\nThe shortest failing program found ({len(short)} of the "
                f"{len(program)} random operations of random_program(seed={seed}){drawn}, in "
                f"minipaged.grader.ex12_prefix_cache), on a new RadixCache(block_size=2):"
                f"\n  {steps}"
            )


def check_block_manager_hits_and_evicts_least_recent_first(student):
    """in the block manager: a finished prompt's blocks are hit, then evicted oldest first

    Rule: a new prompt reuses the cached blocks match finds; a cached block is evicted only
    when the allocator hands it out again, least recently released first, and forget drops
    it with every prefix below it."""
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
        check_diverging_insert_splits_an_edge,
        check_a_block_is_never_cached_twice,
        check_forget_cuts_the_subtree,
        check_random_operations_match_the_contract,
        check_block_manager_hits_and_evicts_least_recent_first,
    )
)
