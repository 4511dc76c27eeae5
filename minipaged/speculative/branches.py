"""The token tree as forked block tables (§5): every node's branch shares what it can.

Node $i$'s *branch* is the block table of the sequence it would continue: the prefix, then the
path from the root to $i$. It is made the way §5 makes any child: ``fork`` the parent node's
branch (no copy, $\\mathcal{R}[p] \\leftarrow \\mathcal{R}[p] + 1$ for each block), then
``append_slot`` for the node's token. The parent still holds its last block, so the append
copies on write when that block is partly filled, or takes a fresh block when it is full: each
node costs exactly one block, while a tree that copied its prefix would cost
$\\lceil (P + \\delta + 1)/B \\rceil$ blocks per node. The root's branch is the sequence itself.

The copies run before the verify pass, which writes the tree's keys and values. So a copy
reads its source as it is *before* that pass: it brings the prefix's rows (already right) and
the tree's rows are written by the pass itself, into every branch that holds them. A copy whose
source is itself a copy made this step reads the original source instead (a chain of copies
cannot run in one batch). After the verdict, the kept node's branch becomes the sequence's
table (no key or value moves) and every other branch is freed: their blocks and refcounts
return. This module holds metadata only, as the block manager does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from minipaged.block_manager import BlockManager
from minipaged.events import SeqId
from minipaged.speculative.tree import TokenTree


@dataclass(slots=True)
class Branches:
    """The tables of one tree: ``node_seqs[i]`` is node $i$'s branch (``seq`` for the root),
    ``prefix_len`` is $P$ (the root sits at position $P$), ``seq_blocks`` is the sequence's
    table when the branches were made (its first $P$ positions: the prefix), ``copies`` are
    the copy-on-write pairs to run before the verify pass, ``home_slots[i]`` is where node
    $i$'s key and value go in its own branch, and ``extra_writes`` lists ``(node, slot)``: the
    same key and value, for branches below it whose copy of that block was made before the
    pass wrote it."""

    seq: SeqId
    prefix_len: int
    seq_blocks: list[int]
    node_seqs: list[SeqId] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)
    home_slots: list[int] = field(default_factory=list)
    extra_writes: list[tuple[int, int]] = field(default_factory=list)


def fork_branches(
    bm: BlockManager,
    seq: SeqId,
    tree: TokenTree,
    new_seq_id: Callable[[], SeqId],
    earlier_copies: Sequence[tuple[int, int]] = (),
    token_ids: Sequence[int] | None = None,
) -> Branches:
    """Fork a branch for every guess of ``tree`` below ``seq`` (whose table already holds
    the root's slot): guesses that do not fit the device pool are cut from ``tree`` (breadth
    first, so what stays is still a tree). ``earlier_copies`` are this
    step's copies made before (the scheduler's), so no copy reads another's destination.
    ``token_ids`` (the sequence's tokens, with prefix caching) lets full blocks register."""
    table = bm.table(seq)
    branches = Branches(seq, table.num_tokens - 1, list(table.blocks), [seq])
    origin = {dst: src for src, dst in earlier_copies}  # block -> the block it copies
    for i in range(1, len(tree)):
        if bm.device.num_free < 1:  # each guess takes one block
            del tree.nodes[i:]
            break
        node = tree.nodes[i]
        child = new_seq_id()
        bm.fork(branches.node_seqs[node.parent], child)
        tokens = None if token_ids is None else [*token_ids, *tree.tokens(i)]
        cow = bm.append_slot(child, tokens).cow
        if cow is not None:
            src, dst = cow
            origin[dst] = origin.get(src, src)
            branches.copies.append((origin[dst], dst))
        branches.node_seqs.append(child)
    _plan_writes(bm, tree, branches)
    return branches


def _plan_writes(bm: BlockManager, tree: TokenTree, branches: Branches) -> None:
    """Node $a$ at position $P + \\delta_a$ is written to that position's slot in its own
    branch and in the branch of every node below it, each distinct slot once. A slot never
    gets two nodes: a block two branches share was forked after both held its tokens."""
    p = branches.prefix_len
    tables = [bm.table(s) for s in branches.node_seqs]
    branches.home_slots = [tables[i].slot(p + node.depth) for i, node in enumerate(tree.nodes)]
    writer = {slot: i for i, slot in enumerate(branches.home_slots)}
    for m in range(len(tree)):
        for a in tree.path(m)[:-1]:
            slot = tables[m].slot(p + tree.nodes[a].depth)
            if writer.setdefault(slot, a) != a:
                raise AssertionError(f"slot {slot} would hold nodes {writer[slot]} and {a}")
            if slot != branches.home_slots[a] and (a, slot) not in branches.extra_writes:
                branches.extra_writes.append((a, slot))


def adopt(bm: BlockManager, branches: Branches, keep: int) -> list[SeqId]:
    """Node ``keep``'s branch becomes the sequence's table; every other branch is freed,
    deepest first. No key or value is copied: the sequence's old table is released and the
    kept branch is forked into its id and released, which leaves every $\\mathcal{R}[p]$ as
    if the table had been renamed. Returns the freed branch ids."""
    seq, kept = branches.seq, branches.node_seqs[keep]
    pruned = [s for i, s in enumerate(branches.node_seqs) if i not in (0, keep)]
    for branch in reversed(pruned):
        bm.free(branch)
    if keep:
        bm.free(seq)
        bm.fork(kept, seq)
        bm.free(kept)
    return pruned
