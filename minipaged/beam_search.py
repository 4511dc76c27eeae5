"""One step of beam search over cumulative log-probabilities.

Beam search keeps the $K$ best sequences (source text §5). Each step, every beam proposes
every next token; the $K$ best (beam, token) pairs by cumulative log-probability survive. A
beam chosen twice forks, a beam not chosen is freed: through the block manager, the beams
share every block they have in common, and only diverging blocks are copied.

The rule matches transformers' ``generate(num_beams=K, do_sample=False)``: candidates are the
top $2K$ of the flattened ``[beams, vocab]`` scores (more with several EOS tokens); a candidate
ending in EOS among the first $K$ becomes a finished hypothesis, the others fill the $K$ new
beams in score order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, slots=True)
class Candidate:
    """A beam extended by one token, with the cumulative log-probability it would have."""

    parent: int  # index of the beam it extends
    token: int
    score: float  # cumulative log-probability with the token


def select(
    logits: Tensor, scores: list[float], beam_width: int, eos_ids: frozenset[int]
) -> tuple[list[Candidate], list[Candidate]]:
    """From ``logits`` ``[beams, vocab]`` and each beam's cumulative log-probability, return
    ``(new_beams, finished)``: up to ``beam_width`` surviving candidates best first, and the
    EOS candidates (a token of ``eos_ids``) that rank among the first ``beam_width`` (pass an
    empty set to never finish). As in transformers, $(1 + |\\text{eos}|)K$ candidates are
    ranked, at least $2K$: each beam may end in every EOS token, and $K$ must go on."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # [beams, vocab]
    totals = logprobs + torch.tensor(scores, device=logits.device)[:, None]
    vocab = totals.shape[1]
    ranked_count = max(2, 1 + len(eos_ids)) * beam_width
    top = torch.topk(totals.flatten(), min(ranked_count, totals.numel()))
    beams: list[Candidate] = []
    finished: list[Candidate] = []
    ranked = zip(top.values.tolist(), top.indices.tolist(), strict=True)
    for rank, (score, index) in enumerate(ranked):
        candidate = Candidate(index // vocab, index % vocab, score)
        if candidate.token in eos_ids:
            if rank < beam_width:
                finished.append(candidate)
            continue
        beams.append(candidate)
        if len(beams) == beam_width:
            break
    return beams, finished


def normalized(score: float, length: int, length_penalty: float) -> float:
    """How finished beams are ranked: $\\log p / \\text{length}^{\\alpha}$."""
    return score / (max(length, 1) ** length_penalty)
