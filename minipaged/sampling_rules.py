"""What each field of ``SamplingParams`` accepts, written once: ``SamplingParams`` checks its
fields with ``check_sampling_value``, and the command lines' sampling flags (``--max-tokens``,
``--temperature``, ``--top-p``, ``--top-k``, ``--n``, ``--beam-width``) refuse a typed value
with it, so a value the library refuses is refused where it is typed, with the same words.

A seed follows ``EngineConfig``'s rule for ``seed`` (``config.check_setting``): the engine's
seed and a request's are the same kind of number, a generator's 64 bits.

Each rule judges one field alone; what two fields say together (beam search beside ``n``)
is ``SamplingParams``' own check. This module imports no torch: the command line builds its
parser from it before any heavy import.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

from minipaged.config import check_setting
from minipaged.python_numbers import MAX_COUNT

MIN_TEMPERATURE = 0.01
"""The smallest temperature but 0, vLLM's floor (its ``_MAX_TEMP``), which keeps logits / T
far inside float32's range: ``1e-300`` is 0 in float32, and logits divided by it are
infinite, every probability NaN."""

MAX_TEMPERATURE = 100.0
"""The largest temperature. A model's logits differ by tens of nats at most; divided by more
than 100 every such gap is under a nat, so the draw is close to uniform over the vocabulary and
ignores the model (at ``1e30`` it is exactly uniform in float32, and past float32's range the
temperature itself is infinite). A temperature that high is a typo, not a setting."""

MIN_TOP_P = 2.0**-126
"""The smallest ``top_p``: float32's smallest normal number. The probabilities top-p cuts are
float32, where a smaller p is 0 or a subnormal that rounds away; any p below the most likely
token's probability keeps that token alone, so this one already does all a smaller one could."""

MAX_TOKEN_NATS = -math.log(2.0**-149)
"""How unlikely a token a beam can hold may be, in nats (103.3): float32's smallest positive
probability, $2^{-149}$. A beam's score, its summed log-probabilities, is at least
$-\\text{len} \\cdot 103.3$."""

MAX_LENGTH_PENALTY = int(
    (math.log(sys.float_info.max) - math.log(MAX_TOKEN_NATS)) / math.log(MAX_COUNT) - 1
)
"""The largest $|\\alpha|$ of ``length_penalty`` (31): a finished beam's score is divided by
$\\text{len}^{\\alpha}$, and the quotient must stay a finite, non-zero float for every length a
sequence can have (up to ``MAX_COUNT``): for $\\alpha < 0$ it is the score times
$\\text{len}^{|\\alpha|}$, up to $103.3 \\cdot \\text{len}^{1 + |\\alpha|}$. Past it a long beam
ranks at $-\\infty$ beside every other such beam (or the divisor overflows inside a step)."""

MIN_LENGTH_PENALTY = 2.0**-57
"""The smallest non-zero $|\\alpha|$: below it $\\text{len}^{\\alpha}$ is 1.0, or the float
beside it, for every length up to ``MAX_COUNT``, so beams rank as with $\\alpha = 0$."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(low: int) -> tuple[Callable[[object], bool], str]:
    """The rule of a count from ``low`` to ``MAX_COUNT``."""
    return (
        lambda v: _is_int(v) and low <= v <= MAX_COUNT,
        f"an integer from {low} to {MAX_COUNT:,} (block ids and lengths are int32)",
    )


def _token_ids(value: object) -> bool:
    return isinstance(value, list | tuple) and all(_is_int(t) and t >= 0 for t in value)


RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "max_tokens": _count(1),
    "temperature": (
        lambda v: _is_number(v) and (v == 0 or MIN_TEMPERATURE <= v <= MAX_TEMPERATURE),
        f"0 (greedy) or from {MIN_TEMPERATURE} to {MAX_TEMPERATURE:g}: a smaller one divides "
        "the logits past float32's range, and the softmax is NaN (vLLM raises it to "
        f"{MIN_TEMPERATURE}); a larger one samples uniformly, ignoring the model; pass 0 for "
        "greedy",
    ),
    "top_p": (
        lambda v: _is_number(v) and MIN_TOP_P <= v <= 1,
        f"from {MIN_TOP_P:.4g} (float32's smallest normal, where the probabilities live) to 1 "
        "(1 keeps every token); any top_p below the likeliest token's probability keeps that "
        "token alone, and temperature 0 is greedy",
    ),
    "top_k": (
        lambda v: _is_int(v) and -1 <= v <= MAX_COUNT,
        f"an integer from 0 to {MAX_COUNT:,} (0 or, as in vLLM, -1 keeps every token)",
    ),
    "n": _count(1),
    "beam_width": _count(1),
    "length_penalty": (
        lambda v: _is_number(v) and (v == 0 or MIN_LENGTH_PENALTY <= abs(v) <= MAX_LENGTH_PENALTY),
        f"0, or a number from {MIN_LENGTH_PENALTY:.3g} to {MAX_LENGTH_PENALTY} in size, of "
        "either sign: a beam's score is divided by its length to this power, which must stay "
        "a finite float, and a smaller one ranks as 0 does (pass 0)",
    ),
    "use_beam_search": (lambda v: isinstance(v, bool), "True or False"),
    "ignore_eos": (lambda v: isinstance(v, bool), "True or False"),
    "stop_token_ids": (
        _token_ids,
        "a list of token ids (a tensor's or an array's as ids.tolist(), as for a prompt)",
    ),
}
"""Each field but ``seed``: whether a value is accepted, and what is, for the refusal."""


def check_sampling_value(name: str, value: object) -> None:
    """Refuse ``value`` for the ``SamplingParams`` field ``name`` with a ``ValueError`` that
    names the field, what it accepts and the value; a seed by ``EngineConfig``'s rule, or None
    (the engine derives one)."""
    if name == "seed":
        if value is not None:
            check_setting("seed", value)
        return
    accepts, what = RULES[name]
    if not accepts(value):
        raise ValueError(f"{name} must be {what}, got {value!r}")
