"""The token tree: a drafter's guesses, top-$k$ at each depth up to depth $d$.

Node 0 is the root: the sequence's last token, at position $P$ (the prefix $0 \\ldots P-1$ is
cached). A node at depth $\\delta$ sits at position $P + \\delta$. Nodes are stored breadth first,
so a parent always comes before its children: node $i$'s ancestors all have indices below $i$.

The ancestors mask $M$ says which nodes each node attends to in the verify pass:
$M_{ij} = 1$ iff node $j$ lies on the path from the root to node $i$ ($j = i$ included). With
the prefix, node $i$ sees exactly the tokens of the sequence it would continue: positions
$0 \\ldots P-1$ and its ancestors. A chain ($k = 1$) gives the causal mask of a prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from minipaged.sampling import SamplingParams


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """One guessed token: its ``parent`` index (-1 for the root), its ``depth`` $\\delta$, and
    ``q``, the draft distribution ``[vocab]`` it was drawn from (None: a deterministic guess,
    that is a one-hot $q$)."""

    token: int
    parent: int
    depth: int
    q: Tensor | None = None


class Drafter(Protocol):
    """Who guesses. ``propose`` returns, for each context (the tokens of a sequence followed by
    a path of the tree), at most ``k`` guesses of the next token as ``(token, q)`` pairs. Greedy
    requests (temperature 0) want the $k$ most likely tokens, with ``q`` None; sampling ones
    want tokens drawn from ``q`` with ``generator`` (or deterministic guesses, ``q`` None), so
    that speculative sampling keeps the target's distribution."""

    def propose(
        self,
        contexts: Sequence[Sequence[int]],
        k: int,
        params: SamplingParams,
        generator: torch.Generator,
    ) -> list[list[tuple[int, Tensor | None]]]: ...


@dataclass(slots=True)
class TokenTree:
    """The root and the guesses below it, breadth first (parents before children)."""

    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def rooted_at(cls, token: int) -> TokenTree:
        return cls([Node(token, -1, 0)])

    def add(self, token: int, parent: int, q: Tensor | None = None) -> int:
        """Append a child of ``parent``; return its index."""
        if not 0 <= parent < len(self.nodes):
            raise ValueError(f"parent {parent} is not a node of this tree (0..{len(self) - 1})")
        self.nodes.append(Node(token, parent, self.nodes[parent].depth + 1, q))
        return len(self.nodes) - 1

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def depth(self) -> int:
        return max(node.depth for node in self.nodes)

    def children(self, i: int) -> list[int]:
        return [j for j, node in enumerate(self.nodes) if node.parent == i]

    def path(self, i: int) -> list[int]:
        """Node indices from the root to ``i``, both included."""
        path = []
        while i >= 0:
            path.append(i)
            i = self.nodes[i].parent
        return path[::-1]

    def tokens(self, i: int) -> list[int]:
        """The guessed tokens on the path to ``i``, the root's excluded."""
        return [self.nodes[j].token for j in self.path(i)[1:]]

    def ancestors_mask(self) -> Tensor:
        """$M$ ``[n, n]`` bool: $M_{ij}$ iff $j$ is on the path from the root to $i$."""
        mask = torch.zeros(len(self), len(self), dtype=torch.bool)
        for i in range(len(self)):
            mask[i, self.path(i)] = True
        return mask


def grow_tree(
    drafter: Drafter,
    context: Sequence[int],
    depth: int,
    branching: int,
    max_nodes: int,
    params: SamplingParams,
    generator: torch.Generator,
) -> TokenTree:
    """Ask ``drafter`` for the tree below ``context``'s last token, one depth at a time: every
    node of the frontier gets up to ``branching`` children, until depth ``depth`` or until the
    tree holds ``max_nodes`` guesses (breadth first, so a cap cuts the deepest guesses).

    The drafter is asked only for what can still be kept: with room for $r$ more guesses, at
    most $r$ frontier nodes are extended and each by at most $\\min(k, r)$ guesses. So the
    drafting work is bounded by ``max_nodes`` (which the caller sets from the pool's free
    blocks), never by $k^d$: a tree of branching 32 and depth 4 on a pool with room for 6
    guesses drafts 6, not 33,000 to cut afterwards."""
    tree = TokenTree.rooted_at(context[-1])
    frontier = [0]
    for _ in range(depth):
        room = max_nodes - (len(tree) - 1)
        if not frontier or room <= 0:
            break
        frontier = frontier[:room]  # each node kept below costs one guess of the room
        contexts = [[*context, *tree.tokens(i)] for i in frontier]
        guesses = drafter.propose(contexts, min(branching, room), params, generator)
        next_frontier = []
        for parent, children in zip(frontier, guesses, strict=True):
            for token, q in children[:branching]:
                if len(tree) - 1 >= max_nodes:
                    break
                next_frontier.append(tree.add(token, parent, q))
        frontier = next_frontier
    return tree
