"""Exercise 12's random programs: inserts, matches and forgets run on a student's tree and on
the contract's model of it (``PrefixModel``, a dict from each cached prefix to its block), the
tree's shape read after every operation, and a failing program shrunk to a short one. The
criterion that runs them is ``ex12_prefix_cache.check_random_operations_match_the_contract``.
"""

from __future__ import annotations

import copy
import random


def new_tree(student, block_size: int = 2):
    """A fresh ``RadixCache`` of the student's, of ``block_size`` tokens a chunk."""
    return student.radix_cache.RadixCache(block_size)


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


MAX_NODES = 10_000
"""A walk of the student's tree stops here: a cycle (a node among its own descendants) or a
tree far larger than any program here builds."""

MAX_DEPTH = 64
"""Nor does it go deeper than this many edges: the programs' sequences hold at most four
chunks, whatever $B$, so a deeper path runs through a cycle."""


def tree_shape(cache) -> list[list] | None:
    """The student's tree as plain lists, walking it from ``cache.root``: for every edge below
    the root, ``[path, key, chunks, blocks, parent_ok]``: the chunks on the way to it (the
    prefix its parent spells), its key, chunks and blocks, and whether its node's ``parent``
    is the node whose ``children`` hold it. None for a tree past ``MAX_NODES`` or
    ``MAX_DEPTH``. Runs next to the student's code."""
    shape, stack = [], [(cache.root, [], 0)]
    while stack:
        node, path, depth = stack.pop()
        for key, child in node.children.items():
            chunks = [list(c) for c in child.chunks]
            shape.append([path, _key(key), chunks, list(child.blocks), child.parent is node])
            if len(shape) > MAX_NODES or depth >= MAX_DEPTH:
                return None
            stack.append((child, path + chunks, depth + 1))
    return shape


def _key(key):
    """A child's key as data: a list for a sequence (a chunk is a tuple of token ids), else an
    int as it is or anything else's ``repr``, so that a tree keyed by a chunk's first token
    is told that its key is not the chunk, rather than failing in the grader's walk."""
    try:
        return list(key)
    except TypeError:
        return key if isinstance(key, int) else repr(key)


def tree_problems(shape: list[list] | None, cached: tuple) -> list[str]:
    """What is wrong with the tree's own shape: every non-root edge holds at least one block,
    with one chunk per block; every child's ``parent`` is the node whose ``children`` hold it,
    under the key of its first chunk; and the blocks on the edges are exactly
    ``cached_blocks()``."""
    if shape is None:
        return [
            f"the tree has more than {MAX_NODES} nodes or a path of more than {MAX_DEPTH} "
            "edges: does a node hold itself below it?"
        ]
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


def spelled(shape: list[list]) -> dict[tuple, int]:
    """The prefixes the tree spells: for each block on an edge, the chunks from the root to
    it (the path to its edge, then its edge's chunks up to its own) and the block."""
    return {
        tuple(tuple(c) for c in path + chunks[: i + 1]): block
        for path, _, chunks, blocks, _ in shape
        for i, block in enumerate(blocks)
    }


def prefix_problems(shape: list[list], model: PrefixModel) -> list[str]:
    """Where the tree's structure disagrees with the prefixes it holds: each cached block must
    sit where its own prefix ends, the path from the root spelling that prefix chunk by chunk.
    A tree whose answers are right so far may still be wrong here (an edge not split, or split
    at the wrong chunk; a node hung under the wrong parent), and a later lookup goes wrong."""
    tree = spelled(shape)
    where = {block: prefix for prefix, block in model.blocks.items()}
    problems = []
    for prefix, block in tree.items():
        own = where.get(block)
        if own is None or own == prefix:
            continue
        said = (
            f"block {block} ends prefix {_listed(prefix)} in your tree, but it holds the last "
            f"chunk of {_listed(own)}"
        )
        if len(prefix) > len(own):
            why = (
                "the path to it runs through chunks that are not its prefix's: split the edge "
                "where the two prefixes part, at the first chunk that differs, and hang the new "
                "blocks below the split"
            )
        elif len(prefix) < len(own):
            why = (
                "it hangs above where its prefix ends: some chunks before it are not on the path "
                "to it (an edge split before the chunk where the prefixes part, or the children "
                "of a forgotten node kept under its parent)"
            )
        else:
            why = "a chunk on the path to it is not its prefix's: hang it below its own prefix"
        problems.append(f"{said}: {why}")
    on_edges = set(tree.values())
    for prefix, block in model.blocks.items():
        if block in on_edges or prefix in tree:
            continue
        problems.append(
            f"prefix {_listed(prefix)} is cached in block {block}, but no path of your tree "
            "spells it: did a new child take the key of a child already there (which drops "
            "that child and its subtree)?"
        )
    return problems


def _listed(prefix: tuple) -> list[list[int]]:
    return [list(chunk) for chunk in prefix]


def random_program(
    seed: int, length: int = 500, block_size: int = 2, token_ids: tuple[int, int] = (1, 2)
) -> list[tuple]:
    """``length`` random operations, each ``("insert", tokens, blocks)``, ``("match", tokens)``
    or ``("forget", block)``, over the two token ids ``token_ids`` so that prefixes collide and
    edges split, for a tree of ``block_size`` tokens a chunk: sequences of up to four chunks
    and one token. Half the inserts reuse the blocks of the cached prefix, as a prefix hit
    would. The same ``seed``, ``block_size`` and ``token_ids`` give the same program; other
    ``token_ids``, the same program over those ids."""
    rng, model, program, next_block = random.Random(seed), PrefixModel(block_size), [], 0
    for _ in range(length):
        size = rng.randint(0, 4 * block_size + 1)
        tokens = [token_ids[rng.randint(1, 2) - 1] for _ in range(size)]
        op = rng.random()
        if op < 0.4:
            blocks = list(range(next_block, next_block + len(tokens) // block_size + 1))
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


def called(op: tuple) -> str:
    """``op`` as the call a student reads: ``insert([1, 2, 3], [0, 1])``."""
    return f"{op[0]}({', '.join(map(repr, op[1:]))})"


def _run_ops(student, program: list[tuple], block_size: int) -> list[dict]:
    """Next to the student's code: run ``program`` on a fresh tree of theirs, of
    ``block_size`` tokens a chunk, and after each operation record what it returned (or
    raised), the tree's shape and ``cached_blocks()``. Stops at the first exception."""
    cache, seen = new_tree(student, block_size), []
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


def run_program(student, program: list[tuple], block_size: int = 2) -> tuple[str, int]:
    """Run ``program`` on a fresh tree of the student's and on the contract's model, both of
    ``block_size`` tokens a chunk; return what first went wrong (a wrong answer, a broken tree,
    an exception), or ``""``, and how many operations ran up to it."""
    model, tree_before = PrefixModel(block_size), []
    seen = student.run(_run_ops, program, block_size)
    for ran, (op, step) in enumerate(zip(program, seen, strict=False), start=1):
        if "raised" in step:
            return f"{called(op)} raised {step['raised']}", ran
        got, expected = step["got"], getattr(model, op[0])(*op[1:])
        if got != expected:
            return f"{called(op)} returned {got!r}, expected {expected!r}", ran
        if op[0] == "match" and step["tree"] != tree_before:
            return (
                f"{called(op)} changed the tree: match is a pure lookup (the block manager "
                "calls it to ask, before it decides anything), so it splits no edge",
                ran,
            )
        tree_before = step["tree"]
        problems = tree_problems(step["tree"], step["cached"])
        if step["tree"] is not None:
            problems += prefix_problems(step["tree"], model)
        if problems:
            return f"after {called(op)} the tree is broken: " + "; ".join(problems[:2]), ran
        blocks = tuple(sorted(model.blocks.values()))
        if tuple(step["cached"]) != blocks:
            cached = step["cached"]
            return f"after {called(op)}, cached_blocks() is {cached}, expected {blocks}", ran
    if len(seen) < len(program):
        return "your tree answered fewer operations than it was given", len(seen) + 1
    return "", len(program)


SHRINK_RUNS = 500
"""How many shorter programs ``shrink`` may try: a count, not a time, so that the program a
student sees does not depend on how busy the machine is."""


def shrink(
    student, program: list[tuple], failure: str, block_size: int = 2
) -> tuple[list[tuple], str]:
    """A shorter program that still fails, and its failure: drop runs of operations, halving
    the run's length, for as long as something fails (delta debugging), trying at most
    ``SHRINK_RUNS`` programs."""
    runs, size = 0, max(len(program) // 2, 1)
    while size >= 1 and runs < SHRINK_RUNS:
        i, dropped = 0, False
        while i < len(program) and runs < SHRINK_RUNS:
            candidate = program[:i] + program[i + size :]
            why, ran = run_program(student, candidate, block_size) if candidate else ("", 0)
            runs += 1
            if why:
                program, failure, dropped = candidate[:ran], why, True
            else:
                i += size
        if not dropped:
            size //= 2
    return program, failure
