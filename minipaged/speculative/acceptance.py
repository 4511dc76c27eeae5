"""Which guesses stay: the acceptance rules, from the target's logits at every tree node.

- Greedy: walk down from the root while some child holds the target's argmax at its parent;
  keep that path, then add the target's argmax at the last kept node (the bonus token). The
  output is exactly what plain greedy decoding writes, $m + 1$ tokens for $m$ accepted guesses.
- Sampling (Leviathan et al. 2023; SpecInfer's multi-candidate form): at node $u$ with target
  distribution $p$, try the children in order. Child $x$, drawn from $q$, is kept with
  probability $\\min(1, p(x)/q(x))$; when it is not, $p \\leftarrow \\mathrm{norm}(\\max(0,
  p - q))$ and the next child is tried against that residual. When no child is kept, the bonus
  token is drawn from the last $p$. Each token so chosen has exactly the target's distribution,
  whatever the drafter proposed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from minipaged.sampling import SamplingParams, distribution
from minipaged.speculative.tree import TokenTree


@dataclass(frozen=True, slots=True)
class Verdict:
    """``accepted``: the kept nodes from the top down (the root excluded); ``bonus``: the
    target's token after the last kept node (after the root when none is kept)."""

    accepted: tuple[int, ...]
    bonus: int

    @property
    def last(self) -> int:
        """The deepest kept node: its branch holds every kept token's key and value."""
        return self.accepted[-1] if self.accepted else 0


def accept(
    tree: TokenTree, logits: Tensor, params: SamplingParams, generator: torch.Generator
) -> Verdict:
    """The verdict for ``tree`` given the target's ``logits`` ``[len(tree), vocab]`` (row $i$:
    the next-token logits after node $i$)."""
    if params.temperature == 0:
        return accept_greedy(tree, logits)
    return accept_sampling(tree, logits, params, generator)


def accept_greedy(tree: TokenTree, logits: Tensor) -> Verdict:
    target = torch.argmax(logits, dim=-1).tolist()  # the target's choice after each node
    node, accepted = 0, []
    while True:
        match = [c for c in tree.children(node) if tree.nodes[c].token == target[node]]
        if not match:
            return Verdict(tuple(accepted), target[node])
        node = match[0]
        accepted.append(node)


def accept_sampling(
    tree: TokenTree, logits: Tensor, params: SamplingParams, generator: torch.Generator
) -> Verdict:
    node, accepted = 0, []
    while True:
        p = _normalized(distribution(logits[node], params))
        kept = None
        for child in tree.children(node):
            token, q = tree.nodes[child].token, tree.nodes[child].q
            q = _one_hot(token, p) if q is None else q.to(p.device, torch.float32)
            u = float(torch.rand((), generator=generator, device=generator.device))
            if u * float(q[token]) < float(p[token]):  # u < p(x)/q(x), without dividing by 0
                kept = child
                break
            residual = torch.clamp(p - q, min=0.0)
            if float(residual.sum()) > 0:  # else p == q: nothing was ever rejected in truth
                p = residual / residual.sum()
        if kept is None:
            drawn = torch.multinomial(p.to(generator.device), 1, generator=generator)
            return Verdict(tuple(accepted), int(drawn))
        node = kept
        accepted.append(node)


def _normalized(probs: Tensor) -> Tensor:
    return probs / probs.sum()


def _one_hot(token: int, like: Tensor) -> Tensor:
    q = torch.zeros_like(like)
    q[token] = 1.0
    return q
