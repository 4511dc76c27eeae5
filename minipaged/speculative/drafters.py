"""Two drafters behind one interface (``minipaged.speculative.tree.Drafter``).

- ``NgramDrafter``: prompt lookup. Find the latest earlier occurrence of the context's last $n$
  tokens and guess what followed it there; no model, so it is free, and it shines on text that
  repeats itself (code, quotes, a small model's loops).
- ``DraftModelDrafter``: a smaller Llama with the target's tokenizer guesses the next tokens.

Both return at most $k$ guesses per context. A deterministic guess carries ``q = None`` (a
one-hot draft distribution); a drawn guess carries the distribution $q$ it was drawn from.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from minipaged.model import Llama
from minipaged.sampling import SamplingParams, distribution

Guesses = list[list[tuple[int, Tensor | None]]]


class NgramDrafter:
    """Prompt lookup: for $n$ = ``max_n`` down to ``min_n``, every earlier occurrence of the
    context's last $n$ tokens, latest first, proposes the token that followed it. The first
    $k$ distinct tokens found are the guesses, all deterministic (``q`` None)."""

    def __init__(self, max_n: int = 3, min_n: int = 1) -> None:
        self.max_n, self.min_n = max_n, min_n

    def propose(
        self,
        contexts: Sequence[Sequence[int]],
        k: int,
        params: SamplingParams,
        generator: torch.Generator,
    ) -> Guesses:
        return [[(token, None) for token in self.lookup(list(ctx), k)] for ctx in contexts]

    def lookup(self, context: list[int], k: int) -> list[int]:
        """Up to ``k`` distinct next tokens, longest match first, then latest first."""
        found: list[int] = []
        for n in range(min(self.max_n, len(context) - 1), self.min_n - 1, -1):
            suffix = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):  # latest occurrence first
                if context[start : start + n] == suffix:
                    token = context[start + n]
                    if token not in found:
                        found.append(token)
                        if len(found) == k:
                            return found
        return found


class DraftModelDrafter:
    """A smaller Llama guesses: the $k$ most likely next tokens for a greedy request, or $k$
    independent draws from its distribution $q$ (the request's temperature, top-k and top-p
    applied) for a sampling one. Each call is one contiguous forward pass over the contexts,
    right-padded (causal attention never lets a position see the padding after it)."""

    def __init__(self, model: Llama) -> None:
        self.model = model

    @torch.inference_mode()
    def propose(
        self,
        contexts: Sequence[Sequence[int]],
        k: int,
        params: SamplingParams,
        generator: torch.Generator,
    ) -> Guesses:
        device = next(self.model.parameters()).device
        width = max(len(ctx) for ctx in contexts)
        rows = [list(ctx) + [0] * (width - len(ctx)) for ctx in contexts]
        logits = self.model.forward_contiguous(torch.tensor(rows, device=device))  # [b, T, V]
        last = logits[torch.arange(len(rows)), torch.tensor([len(c) - 1 for c in contexts])]
        guesses: Guesses = []
        for row in last:  # [V]
            if params.temperature == 0:
                top = torch.topk(row, min(k, row.numel())).indices.tolist()
                guesses.append([(token, None) for token in top])
            else:
                q = distribution(row, params)
                q = q / q.sum()
                drawn = torch.multinomial(q.to(generator.device), k, True, generator=generator)
                guesses.append([(token, q) for token in drawn.tolist()])
        return guesses
