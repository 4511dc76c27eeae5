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
from collections.abc import Callable

from minipaged.config import check_setting

MIN_TEMPERATURE = 0.01
"""The smallest temperature but 0, vLLM's floor (its ``_MAX_TEMP``), which keeps logits / T
far inside float32's range: ``1e-300`` is 0 in float32, and logits divided by it are
infinite, every probability NaN."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _token_ids(value: object) -> bool:
    return isinstance(value, list | tuple) and all(_is_int(t) and t >= 0 for t in value)


RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "max_tokens": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "temperature": (
        lambda v: _is_number(v) and (v == 0 or MIN_TEMPERATURE <= v < math.inf),
        f"finite and 0 (greedy) or at least {MIN_TEMPERATURE}: a smaller one divides the "
        "logits past float32's range, and the softmax is NaN (vLLM raises it to "
        f"{MIN_TEMPERATURE}); pass 0 for greedy",
    ),
    "top_p": (lambda v: _is_number(v) and 0 < v <= 1, "in (0, 1] (1 keeps every token)"),
    "top_k": (
        lambda v: _is_int(v) and v >= -1,
        "an integer >= 0 (0 or, as in vLLM, -1 keeps every token)",
    ),
    "n": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "beam_width": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "length_penalty": (lambda v: _is_number(v) and math.isfinite(v), "a finite number"),
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
