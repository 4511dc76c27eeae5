"""Realistic student bugs in exercise 12's radix tree, each once passing every criterion (or
the criterion meant for it) and now failing that criterion with its cause named (the rest of
the realistic bugs: test_grader_student_bugs.py and test_grader_student_bugs_attention.py).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from test_exercises import failures_of

from minipaged import radix_cache
from minipaged.grader import ex12_prefix_cache as ex12
from minipaged.grader.ex12_random_programs import tree_problems, tree_shape

# The library's code handed in as a student's: the copy check that would refuse it is off.
pytestmark = pytest.mark.usefixtures("library_code_allowed")


# -- a radix tree whose structure is wrong ------------------------------------------------------
# Each tree answers the fixed criteria's first calls right; what is wrong is where a block sits:
# the tree spells another prefix than the one the block holds, and only a later lookup (or the
# structure check after every operation) shows it.


class _NeverSplits(radix_cache.RadixCache):
    """A sequence leaving an edge partway gets its new edge below the whole edge: no split."""

    def _split(self, node, k):
        pass


class _SplitsAtTheDepth(radix_cache.RadixCache):
    """The split point counted from the root (the chunks matched in all), not from the start
    of the edge: the same on an edge below the root, past the parting chunk on any deeper."""

    def _split(self, node, k):
        above, depth = node.parent, 0
        while above is not None:
            above, depth = above.parent, depth + len(above.blocks)
        super()._split(node, k + depth)


class _SplitsOneEarly(radix_cache.RadixCache):
    """The split index taken as the last matching chunk, k - 1, rather than the first that
    differs: the new edge hangs one chunk above its prefix's end."""

    def _split(self, node, k):
        super()._split(node, max(k - 1, 1))


class _WalksOnlyWholeEdges(radix_cache.RadixCache):
    """The walk enters a child only when the sequence covers its whole edge: a shorter one
    stops above it, and insert puts a second child under the same first chunk, replacing the
    first with its whole subtree (a duplicate child)."""

    def _walk(self, chunks):
        node, k, matched = super()._walk(chunks)
        while node is not self.root and len(matched) - k + len(node.blocks) > len(chunks):
            matched, node = matched[: len(matched) - k], node.parent
            k = len(node.blocks)
        return node, k, matched


class _ForgetsTheWholeEdge(radix_cache.RadixCache):
    """forget drops the node of p with every block on its edge, those before p too: blocks
    that running sequences hold, whose prefixes are still valid, leave the cache."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is None:
            return False
        self._drop(node)
        del node.parent.children[node.chunks[0]]
        return True


class _ForgetsOnlyLeaves(radix_cache.RadixCache):
    """forget refuses a block with prefixes below it ("evict the leaves first"), though the
    allocator has already handed it out: a later hit shares its new contents."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is not None and (node.children or node.blocks[-1] != block):
            return False
        return super().forget(block)


class _ForgetKeepsTheLeaves(radix_cache.RadixCache):
    """forget cuts the edge at p but keeps the children below it: the leaves outlive their
    evicted parent and are found after the shorter prefix."""

    def forget(self, block):
        node = self._node_of.get(block)
        if node is None:
            return False
        i = node.blocks.index(block)
        for gone in node.blocks[i:]:
            del self._node_of[gone]
        del node.blocks[i:], node.chunks[i:]
        if not node.blocks:
            del node.parent.children[next(k for k, v in node.parent.children.items() if v is node)]
        return True


@pytest.mark.parametrize(
    ("cls", "criterion", "words"),
    [
        (
            _NeverSplits,
            "diverging_insert_splits_an_edge",
            "after insert([1, 2, 3, 4, 7, 7], [0, 1, 5]) the tree is broken: block 5 ends prefix "
            "[[1, 2], [3, 4], [5, 6], [7, 7]] in your tree, but it holds the last chunk of "
            "[[1, 2], [3, 4], [7, 7]]: the path to it runs through chunks that are not its "
            "prefix's: split the edge",
        ),
        (_SplitsAtTheDepth, "random_operations_match_the_contract", "raised IndexError"),
        (
            _SplitsOneEarly,
            "diverging_insert_splits_an_edge",
            "block 5 ends prefix [[1, 2], [7, 7]] in your tree, but it holds the last chunk of "
            "[[1, 2], [3, 4], [7, 7]]: it hangs above where its prefix ends",
        ),
        (_WalksOnlyWholeEdges, "random_operations_match_the_contract", "expected"),
        (
            _ForgetsTheWholeEdge,
            "forget_cuts_the_subtree",
            "block 0, before block 1 on its edge, went too",
        ),
        (_ForgetsOnlyLeaves, "forget_cuts_the_subtree", "forget may not refuse it"),
        (_ForgetKeepsTheLeaves, "forget_cuts_the_subtree", "2 and 5 ran through 1"),
    ],
    ids=lambda x: getattr(x, "__name__", "")[1:24],
)
def test_a_radix_tree_with_a_block_in_the_wrong_place_fails_with_the_cause(cls, criterion, words):
    module = SimpleNamespace(RadixCache=cls, RadixNode=radix_cache.RadixNode)
    failed = failures_of(12, [criterion], radix_cache=module)
    assert words in failed[criterion], failed


class _ComparesOnlyTheKey(radix_cache.RadixCache):
    """The walk finds a child by its key (its first chunk), then takes the blocks of its edge
    without comparing their chunks with the prompt's: a prompt sharing only the first block
    gets the blocks of another prefix of the same length."""

    def _walk(self, chunks):
        node, matched = self.root, []
        while len(matched) < len(chunks) and chunks[len(matched)] in node.children:
            node = node.children[chunks[len(matched)]]
            take = min(len(node.blocks), len(chunks) - len(matched))
            matched += node.blocks[:take]
            if take < len(node.blocks):
                return node, take, matched
        return node, len(node.blocks), matched


def test_a_hit_sharing_the_blocks_of_another_prefix_is_caught():
    """The block-manager criterion once hit one prompt only, which the blocks held."""
    name = "block_manager_hits_and_evicts_least_recent_first"
    module = SimpleNamespace(RadixCache=_ComparesOnlyTheKey, RadixNode=radix_cache.RadixNode)
    failed = failures_of(12, [name], radix_cache=module)
    assert failed[name].startswith(
        "allocate(1, 5, [1, 2, 8, 9, 5]) hit blocks [0, 1], but block 1 holds tokens [3, 4], "
        "where the prompt has [8, 9]: a hit shares the blocks of another prefix"
    ), failed


class _ChunksOfTwo(radix_cache.RadixCache):
    """Cuts the tokens into chunks of 2, the B of every example, whatever its block_size."""

    def __init__(self, block_size):
        super().__init__(2)


def test_a_radix_tree_that_ignores_its_block_size_is_caught(monkeypatch):
    """Every check of exercise 12 once used B = 2, so a tree cutting chunks of 2 passed them
    all. The drawn program's B is now 3 to 5; the message names it, to reproduce the failure."""
    name = "random_operations_match_the_contract"
    module = SimpleNamespace(RadixCache=_ChunksOfTwo, RadixNode=radix_cache.RadixNode)
    for block_size in ex12.DRAWN_BLOCK_SIZES:
        monkeypatch.setattr(ex12._DRAWS, "choice", lambda sizes, b=block_size: b)
        failed = failures_of(12, [c.name for c in ex12.CRITERIA], radix_cache=module)
        assert list(failed) == [name], failed
        assert f"on a new RadixCache(block_size={block_size}):" in failed[name]


class _TokensAsBytes(radix_cache.RadixCache):
    """Holds a sequence's token ids as bytes, compact and hashable: the same tree for ids
    below 256, a ValueError for any other (and a uint8 array would take it for another id)."""

    def match(self, token_ids):
        return super().match(bytes(token_ids))

    def insert(self, token_ids, blocks):
        return super().insert(bytes(token_ids), blocks)


def test_a_radix_tree_holding_tokens_in_bytes_is_caught():
    """Every program of exercise 12 ran over tokens 1 and 2 (and its fixed checks below 10),
    so a tree holding token ids in bytes passed them all, though a real vocabulary's ids go
    past 255. The drawn program's two ids are now one below 256 and one past 2**16."""
    name = "random_operations_match_the_contract"
    module = SimpleNamespace(RadixCache=_TokensAsBytes, RadixNode=radix_cache.RadixNode)
    failed = failures_of(12, [c.name for c in ex12.CRITERIA], radix_cache=module)
    # bytes() of a tensor's items fails the tensor criterion too; only these two may fail
    assert name in failed and set(failed) <= {name, "token_ids_of_a_tensor_are_token_ids"}, failed
    assert "raised ValueError: bytes must be in range(0, 256)" in failed[name]
    assert re.search(r"token_ids=\(\d+, \d+\)\), drawn for this grading", failed[name])


def test_a_child_keyed_by_its_first_token_is_named_not_a_grader_error():
    """A tree keying each child by the first token of its chunk failed with "TypeError: 'int'
    object is not iterable, in the check's call list(key)", the grader's own line; the
    structure check now says which key it found where the chunk belongs."""
    cache = radix_cache.RadixCache(2)
    cache.insert([1, 2, 3, 4], [0, 1])
    cache.root.children = {1: cache.root.children[(1, 2)]}
    problems = tree_problems(tree_shape(cache), cache.cached_blocks())
    assert problems == [
        "the node of blocks [0, 1] is a child under key 1, but its first chunk is [1, 2]"
    ]
