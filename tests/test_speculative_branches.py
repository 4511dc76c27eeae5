"""Hypothesis: random token trees on random block tables, random verdicts. Forking the
branches and adopting one keeps the invariants, costs one block per guess, copies a block only
where a branch splits one mid-way, leaves every branch a correct view of its tokens' keys and
values, moves no key or value of an accepted token, and returns every block in the end."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from minipaged import invariants
from minipaged.block_manager import BlockManager
from minipaged.speculative.branches import adopt, fork_branches
from minipaged.speculative.tree import TokenTree

SEQ, OTHER = 0, 1


@st.composite
def scenarios(draw):
    block_size = draw(st.sampled_from([1, 2, 4]))
    prefix_len = draw(st.integers(1, 14))  # P: cached tokens; the root sits at position P
    parents = draw(st.lists(st.integers(0, 10**6), max_size=12))
    tree = TokenTree.rooted_at(99)
    for i, choice in enumerate(parents):
        tree.add(100 + i, choice % (i + 1))  # any node made before it
    blocks = -(-(prefix_len + 1) // block_size)
    spare = draw(st.integers(0, len(parents) + 2))
    return dict(
        block_size=block_size,
        prefix_len=prefix_len,
        tree=tree,
        num_blocks=blocks + 1 + spare,
        shared=draw(st.booleans()),  # another sequence holds the prefix too
        prefix_caching=draw(st.sampled_from([None, "hash"])),
        keep=draw(st.integers(0, 10**6)),
    )


def run_copies(kv, pairs, block_size):
    """What ``KVCache.copy_blocks`` does: every source read before any destination written."""
    dsts = [dst for _, dst in pairs]
    assert len(set(dsts)) == len(dsts) and not set(dsts) & {src for src, _ in pairs}
    rows = {(dst, o): kv.get(src * block_size + o) for src, dst in pairs for o in range(block_size)}
    for (dst, o), label in rows.items():
        kv[dst * block_size + o] = label


@given(scenarios())
def test_branches_share_the_prefix_copy_where_they_split_and_all_come_back(case):
    B, P, tree = case["block_size"], case["prefix_len"], case["tree"]
    bm = BlockManager(case["num_blocks"], 0, B, 0.0, case["prefix_caching"])
    tokens = list(range(1, P + 2))  # the prefix and the root
    bm.allocate(SEQ, P, tokens[:P])
    kv = {bm.table(SEQ).slot(p): ("prefix", p) for p in range(P)}  # the emulated KV cache
    if case["shared"]:
        bm.fork(SEQ, OTHER)
    cow = bm.append_slot(SEQ, tokens).cow  # the scheduler reserves the root's slot
    earlier = [cow] if cow else []
    prefix_blocks = list(bm.table(SEQ).blocks[: P // B])  # full blocks before the root's
    free_before = bm.device.num_free
    proposed = len(tree) - 1

    ids = itertools.count(10)
    branches = fork_branches(bm, SEQ, tree, ids.__next__, earlier, tokens)
    invariants.assert_holds(bm)
    guesses = len(tree) - 1  # after any cut for lack of blocks
    assert bm.device.num_free == free_before - guesses, "one block per guess"
    assert guesses == len(branches.node_seqs) - 1 == min(proposed, free_before)
    split_mid_block = sum(1 for node in tree.nodes[1:] if (P + node.depth) % B)
    assert len(branches.copies) == split_mid_block, "a copy only where a block is split"

    run_copies(kv, earlier + branches.copies, B)
    for node, slot in enumerate(branches.home_slots):
        kv[slot] = ("node", node)
    for node, slot in branches.extra_writes:
        kv[slot] = ("node", node)
    for m, branch in enumerate(branches.node_seqs):  # each branch reads its own tokens
        table = bm.table(branch)
        assert table.num_tokens == P + 1 + tree.nodes[m].depth
        assert all(kv.get(table.slot(p)) == ("prefix", p) for p in range(P))
        for a in tree.path(m):
            assert kv.get(table.slot(P + tree.nodes[a].depth)) == ("node", a)

    keep = case["keep"] % len(tree)
    kept_blocks = list(bm.table(branches.node_seqs[keep]).blocks)
    adopt(bm, branches, keep)
    invariants.assert_holds(bm)
    table = bm.table(SEQ)
    assert set(bm.tables) == {SEQ} | ({OTHER} if case["shared"] else set())
    assert table.blocks == kept_blocks, "the kept branch is adopted, not copied"
    assert table.blocks[: P // B] == prefix_blocks, "no full prefix block was copied"
    assert all(kv.get(table.slot(p)) == ("prefix", p) for p in range(P))
    for a in tree.path(keep):
        assert kv.get(table.slot(P + tree.nodes[a].depth)) == ("node", a)

    for seq in list(bm.tables):
        bm.free(seq)
    assert bm.device.num_free == bm.device.num_blocks
