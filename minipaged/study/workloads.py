"""Seeded, model-free workloads: only lengths, no tokens.

A ``Request`` is a prompt length and the output length of each of its sequences: one for
plain decoding, $n$ for parallel sampling, $K$ (all equal) for beam search (§5). The same seed
gives the same requests on every machine (NumPy's PCG64 generator).

Length distributions (``LENGTHS``), none fitted to real traces:

- ``enterprise``: the source text's §2 mix, prompts uniform on 500–1,000 tokens and
  completions about 200 (normal, mean 200, s.d. 50), within $L_{\\max}$ = 8,192;
- ``chat``: long-tailed, ShareGPT-like: log-normal prompts and completions with the means the
  vLLM paper reports for ShareGPT (161 and 338 tokens);
- ``alpaca``: short, Alpaca-like: log-normal with the vLLM paper's Alpaca means (19 and 58).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DEFAULT_MAX_LEN = 8192
"""$L_{\\max}$ of the source text's §2 example."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request: ``prompt_len`` tokens, then ``output_lens[i]`` new tokens for sequence $i$.

    ``beam`` marks beam search: the $K$ = ``len(output_lens)`` beams all have the same length
    and, under paging, share blocks along a branching process (``minipaged.study.simulator``).
    Guaranteed: every length is at least 1 and ``prompt_len + max(output_lens) <= max_len``.
    """

    prompt_len: int
    output_lens: tuple[int, ...]
    max_len: int = DEFAULT_MAX_LEN
    beam: bool = False

    @property
    def final_lens(self) -> tuple[int, ...]:
        """$L_i$: each sequence's length when it finishes, prompt included."""
        return tuple(self.prompt_len + out for out in self.output_lens)


def _lognormal(rng: np.random.Generator, mean: float, size: int, sigma: float = 1.0) -> np.ndarray:
    """Log-normal samples with the given mean: $\\mu = \\ln(\\text{mean}) - \\sigma^2/2$."""
    return rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, size)


def _enterprise(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(500, 1001, size), rng.normal(200, 50, size)


def _chat(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    return _lognormal(rng, 161, size), _lognormal(rng, 338, size)


def _alpaca(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    return _lognormal(rng, 19.3, size), _lognormal(rng, 58.5, size)


LENGTHS: dict[str, Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]] = {
    "enterprise": _enterprise,
    "chat": _chat,
    "alpaca": _alpaca,
}
"""Name -> sampler of (prompt lengths, output lengths), before rounding and clipping."""


def make_workload(
    lengths: str = "enterprise",
    num_requests: int = 1000,
    *,
    n: int = 1,
    beam_width: int = 0,
    max_len: int = DEFAULT_MAX_LEN,
    seed: int = 0,
) -> list[Request]:
    """``num_requests`` requests with lengths drawn from ``LENGTHS`` [``lengths``].

    ``n`` > 1: parallel sampling, each of the $n$ sequences with its own output length.
    ``beam_width`` $K$ > 0: beam search, $K$ beams of one output length. Lengths are rounded
    and clipped so that $1 \\le$ prompt $< L_{\\max}$ and prompt + output $\\le L_{\\max}$.
    """
    if lengths not in LENGTHS:
        raise ValueError(f"unknown length distribution {lengths!r}; choose from {list(LENGTHS)}")
    for name, value, low in (
        ("num_requests", num_requests, 1),
        ("n", n, 1),
        ("max_len", max_len, 2),
    ):
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
    if beam_width < 0 or (beam_width and n > 1):
        raise ValueError(
            f"beam_width must be 0 (no beam search) or positive, and n must be 1 with beam "
            f"search; got beam_width={beam_width}, n={n}"
        )
    rng = np.random.default_rng(seed)
    prompts, outputs = LENGTHS[lengths](rng, num_requests)
    # The first sequence of every request is drawn first, so that n or K does not change it.
    outputs = outputs[:, None]
    if n > 1:
        outputs = np.hstack(
            [outputs, LENGTHS[lengths](rng, num_requests * (n - 1))[1].reshape(num_requests, n - 1)]
        )
    elif beam_width > 1:
        outputs = np.repeat(outputs, beam_width, axis=1)  # beams end together
    prompts = np.clip(np.rint(prompts), 1, max_len - 1).astype(int)
    outputs = np.clip(np.rint(outputs), 1, (max_len - prompts)[:, None]).astype(int)
    return [
        Request(int(p), tuple(int(o) for o in outs), max_len, beam=bool(beam_width))
        for p, outs in zip(prompts, outputs, strict=True)
    ]
