"""How the next token is chosen: ``SamplingParams`` (vLLM's names) and the sampler.

Parallel sampling ($n > 1$) and beam search are where copy-on-write pays off (source text §5):
the engine forks sequences through the block manager; this module only picks tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from minipaged.python_numbers import python_number, take_python_numbers
from minipaged.sampling_rules import check_sampling_value


@dataclass(frozen=True)
class SamplingParams:
    """What to generate for one request.

    - ``max_tokens``: tokens to generate per sequence (at most; EOS or a stop token ends it
      sooner unless ``ignore_eos``).
    - ``temperature``: 0 is greedy; otherwise logits are divided by it before softmax.
    - ``top_k`` (0 = off; vLLM's -1 is taken as 0) and ``top_p`` (1.0 = off): keep only the
      k most likely tokens, or the smallest set whose probability reaches p.
    - ``n``: parallel samples from one prompt, forked so they share the prompt's blocks.
    - ``use_beam_search`` with ``beam_width`` ($K$ in §5): keep the $K$ best sequences by
      cumulative log-probability and return them best first: all $K$, or the ``n`` best when
      ``n`` is above 1 (at most $K$). vLLM's spelling, ``n`` beams with ``beam_width`` left
      at 1, is read as $K = n$. ``length_penalty`` ranks finished beams by
      $\\log p / \\text{len}^{\\alpha}$ as transformers does. Beam search samples nothing:
      ``temperature`` stays at 1.0 or 0, ``top_p`` at 1.0, ``top_k`` at 0; ``beam_width``
      above 1 needs ``use_beam_search=True``.
    - ``seed``: makes this request's sampling reproducible whatever else runs beside it; an
      integer from 0 to $2^{64} - 1$ as ``EngineConfig.seed`` (None: derived from that one).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    use_beam_search: bool = False
    beam_width: int = 1
    ignore_eos: bool = False
    seed: int | None = None
    # Extras after the nine fields of the public surface, so that positional use keeps its order
    length_penalty: float = 1.0
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        take_python_numbers(self)
        if isinstance(self.stop_token_ids, list | tuple):
            stops = tuple(python_number(token) for token in self.stop_token_ids)
            object.__setattr__(self, "stop_token_ids", stops)

        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(message)

        for name in self.__dataclass_fields__:
            check_sampling_value(name, getattr(self, name))
        object.__setattr__(self, "temperature", self.temperature + 0.0)  # -0.0 is 0.0
        if self.top_k == -1:  # vLLM's spelling of "off": one value downstream
            object.__setattr__(self, "top_k", 0)
        if self.use_beam_search:
            if self.n > 1 and self.beam_width == 1:  # vLLM's spelling: n beams, n returned
                object.__setattr__(self, "beam_width", self.n)
            need(
                self.n <= self.beam_width,
                f"beam search returns the n best of its beam_width beams, so n={self.n} needs "
                f"beam_width of at least {self.n} (got {self.beam_width}): raise beam_width or "
                "lower n",
            )
            # Beams are ranked by the model's own log-probabilities; nothing is sampled, so
            # temperature may be left at its default (1: the model's distribution) or 0.
            need(
                self.temperature in (0, 1) and self.top_p == 1 and self.top_k == 0,
                "beam search ranks by the model's log-probabilities and samples nothing: "
                f"leave temperature at 1.0 or 0 (got {self.temperature}), top_p at 1.0 "
                f"(got {self.top_p}) and top_k at 0 (got {self.top_k})",
            )
        else:
            need(
                self.beam_width == 1,
                f"beam_width={self.beam_width} needs use_beam_search=True (beam search keeps "
                "beam_width beams; n is the number of independent samples), or leave "
                "beam_width at 1",
            )
            need(  # as vLLM refuses it: it ranks finished beams, and there are none
                self.length_penalty == 1,
                f"length_penalty={self.length_penalty} ranks finished beams, so it needs "
                "use_beam_search=True; or leave length_penalty at 1.0",
            )

    @property
    def num_sequences(self) -> int:
        """How many sequences the request runs at once: n, or the beam width."""
        return self.beam_width if self.use_beam_search else self.n

    @property
    def num_returned(self) -> int:
        """How many sequences the request returns: n, or for beam search the beam width when
        n is 1."""
        return self.beam_width if self.use_beam_search and self.n == 1 else self.n


def sample(
    logits: Tensor, params: SamplingParams, generator: torch.Generator, num_samples: int = 1
) -> list[int]:
    """Draw ``num_samples`` tokens from one row of ``logits`` ``[vocab]``.

    Greedy (temperature 0) returns the argmax ``num_samples`` times: $n$ greedy samples are
    identical, as in vLLM. Otherwise samples are independent draws (with replacement) from the
    temperature-scaled, top-k / top-p filtered distribution, using ``generator``.
    """
    return sample_rows(logits[None], [params], [generator], [num_samples])[0]


def sample_rows(
    logits: Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator],
    counts: Sequence[int],
) -> list[list[int]]:
    """``sample`` for every row of ``logits`` ``[rows, vocab]`` at once: ``counts[r]`` tokens
    for row $r$ (0 draws nothing), with ``params[r]`` and ``generators[r]``.

    The greedy rows share one argmax, and the sampled rows one ``distributions`` call. A
    single draw is vLLM's exponential race: with $E_i \\sim \\mathrm{Exp}(1)$ independent,
    $\\arg\\max_i p_i / E_i$ is token $i$ with probability $p_i / \\sum_j p_j$. Each row's
    noise comes from its own request's generator, in row order (a seeded request must draw the
    same tokens whoever shares its batch); the division and the argmax are one call each. It
    is how ``torch.multinomial`` draws one sample, so row $r$ gets exactly
    ``torch.multinomial(p_r, counts[r], replacement=True, generator=generators[r])``; several
    draws (a prompt forking into $n$) take that call itself.
    """
    tokens: list[list[int]] = [[] for _ in counts]
    if any(p.temperature == 0 for p in params):
        best = argmax_rows(logits)  # every row's: cheaper than picking the greedy rows first
        for r, p in enumerate(params):
            if p.temperature == 0:
                tokens[r] = [best[r]] * counts[r]
    drawn = [r for r, p in enumerate(params) if p.temperature != 0 and counts[r]]
    if drawn:
        probs = distributions(logits[drawn], [params[r] for r in drawn])  # [len(drawn), vocab]
        noise = torch.ones_like(probs)  # E ~ Exp(1), row by row from each row's generator
        for i, r in enumerate(drawn):
            if counts[r] == 1:
                noise[i].exponential_(generator=generators[r])
            else:
                draws = torch.multinomial(probs[i], counts[r], True, generator=generators[r])
                tokens[r] = draws.tolist()
        winners = argmax_rows(probs / noise)  # [len(drawn)]
        for i, r in enumerate(drawn):
            if counts[r] == 1:
                tokens[r] = [winners[i]]
    return tokens


def argmax_rows(logits: Tensor) -> list[int]:
    """The index of each row's largest value in ``logits`` ``[rows, vocab]``, the first one
    on a tie (``torch.argmax``'s rule, NaN counting as largest). On the CPU numpy finds it:
    torch's CPU argmax compares element by element and took longer than the step's whole
    log-softmax; numpy's vectorized one is over ten times faster."""
    if logits.device.type == "cpu":
        return logits.float().numpy().argmax(-1).tolist()  # float: numpy has no bfloat16
    return torch.argmax(logits, dim=-1).tolist()


def distribution(logits: Tensor, params: SamplingParams) -> Tensor:
    """The distribution ``sample`` draws from, ``[vocab]`` float32 (unnormalized after a top-p
    cut; ``torch.multinomial`` normalizes): temperature-scaled, top-k and top-p filtered.
    Speculative sampling compares the target's and the drafter's with it. Needs temperature
    > 0."""
    return distributions(logits[None], [params])[0]


def distributions(logits: Tensor, params: Sequence[SamplingParams]) -> Tensor:
    """``distribution`` of every row of ``logits`` ``[rows, vocab]`` with its own
    ``params[r]``, as one batched computation; ``[rows, vocab]`` float32.

    Row $r$ is the same, bit for bit, as it would be alone: every operation acts on rows
    independently, and a filter a row does not ask for (``top_k`` 0, ``top_p`` 1) leaves its
    values exactly as they were (its threshold is $-\\infty$, or it keeps every token)."""
    device = logits.device
    temperature = torch.tensor([p.temperature for p in params], device=device)[:, None]
    logits = logits.float() / temperature  # [rows, vocab]
    vocab = logits.shape[-1]
    top_k = [min(p.top_k, vocab) for p in params]  # 0: off
    if any(top_k):
        # Each row's k-th largest logit, read from one topk of the largest k asked for.
        largest = torch.topk(logits, max(top_k)).values  # [rows, max k]
        kth = largest.gather(
            1, torch.tensor([max(k - 1, 0) for k in top_k], device=device)[:, None]
        )
        off = torch.tensor([k == 0 for k in top_k], device=device)[:, None]
        kth = kth.masked_fill(off, float("-inf"))  # [rows, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    top_p = [p.top_p for p in params]
    if min(top_p) < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Keep a token while the mass before it is below top_p: the first always stays. A row
        # with top_p = 1 keeps everything (rounding could push its mass past 1). top_p is at
        # least float32's smallest normal (sampling_rules.MIN_TOP_P): never 0 there
        cut = torch.tensor([p if p < 1 else math.inf for p in top_p], device=device)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= cut[:, None]
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    return probs
