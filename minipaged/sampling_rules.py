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

MAX_LENGTH_PENALTY = int(math.log(sys.float_info.max) / math.log(MAX_COUNT))
"""The largest $|\\alpha|$ of ``length_penalty`` (33): a finished beam's score is divided by
$\\text{len}^{\\alpha}$, which must stay a finite, non-zero float for every length a sequence
can have (up to ``MAX_COUNT``). Past it a long beam's divisor overflows (``OverflowError``
inside a step) or rounds to 0 (a division by zero)."""


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
    "top_p": (lambda v: _is_number(v) and 0 < v <= 1, "in (0, 1] (1 keeps every token)"),
    "top_k": (
        lambda v: _is_int(v) and -1 <= v <= MAX_COUNT,
        f"an integer from 0 to {MAX_COUNT:,} (0 or, as in vLLM, -1 keeps every token)",
    ),
    "n": _count(1),
    "beam_width": _count(1),
    "length_penalty": (
        lambda v: _is_number(v) and abs(v) <= MAX_LENGTH_PENALTY,
        f"a number from -{MAX_LENGTH_PENALTY} to {MAX_LENGTH_PENALTY}: a beam's score is "
        "divided by its length to this power, which must stay a finite float",
    ),
    "use_beam_search": (lambda v: isinstance(v, bool), "True or False"),
    "ignore_eos": (lambda v: isinstance(v, bool), "True or False"),
    "stop_token_ids": (_token_ids, "a list of token ids"),
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
