"""Every field of every public settings dataclass (``SamplingParams``, ``EngineConfig``,
``SpeculativeConfig``, ``ModelShape``, ``LlamaConfig``, ``RopeScaling``) refuses, when the
object is made, each value no run can use: a bool for a number, a float for a count, text
that spells a number, NaN and infinities, a count past ``MAX_COUNT`` (block ids and lengths
are int32), a real number past its range, and a tiny one (1e-300, either sign) that means
nothing but 0. A NumPy scalar is the number it equals. Generated over the dataclasses'
fields: a new field without an entry in ``KINDS`` fails ``test_every_field_has_a_kind``, and
its kind's corpus then runs."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from minipaged import SamplingParams
from minipaged.config import EngineConfig
from minipaged.memory import ModelShape
from minipaged.model import LlamaConfig
from minipaged.python_numbers import MAX_COUNT
from minipaged.rope import RopeScaling
from minipaged.speculative.config import SpeculativeConfig

BASE = {
    SamplingParams: {},
    EngineConfig: {},
    SpeculativeConfig: {},
    ModelShape: dict(num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=8, dtype_bytes=2),
    LlamaConfig: dict(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    ),
    RopeScaling: dict(rope_type="llama3", factor=8.0),
}
"""Each dataclass and arguments that make a valid one."""

KINDS = {
    SamplingParams: {
        "max_tokens": "count",
        "temperature": "real",
        "top_p": "real",
        "top_k": "count",
        "n": "count",
        "use_beam_search": "flag",
        "beam_width": "count",
        "ignore_eos": "flag",
        "seed": "seed",
        "length_penalty": "real",
        "stop_token_ids": "judged by its own check",
    },
    EngineConfig: {
        "model": "judged by its own check",
        "dtype": "text",
        "device": "text",
        "skip_tokenizer_init": "flag",
        "max_model_len": "count",
        "block_size": "count",
        "num_gpu_blocks": "count",
        "num_cpu_blocks": "count",
        "kv_cache_dtype": "text",
        "watermark": "real",
        "prefix_caching": "text",
        "preemption": "text",
        "max_num_seqs": "count",
        "max_num_batched_tokens": "count",
        "enable_chunked_prefill": "flag",
        "long_prefill_token_threshold": "count",
        "backend": "text",
        "seed": "seed",
        "speculative": "judged by its own check",
        "block_manager_class": "judged by its own check",
    },
    SpeculativeConfig: {
        "method": "text",
        "num_speculative_tokens": "count",
        "branching": "count",
        "draft_model": "judged by its own check",
        "max_tree_nodes": "count",
        "ngram_max": "count",
        "ngram_min": "count",
    },
    ModelShape: {
        "num_layers": "count",
        "num_q_heads": "count",
        "num_kv_heads": "count",
        "head_dim": "count",
        "dtype_bytes": "count",
        "name": "text",
    },
    LlamaConfig: {
        "vocab_size": "count",
        "hidden_size": "count",
        "intermediate_size": "count",
        "num_hidden_layers": "count",
        "num_attention_heads": "count",
        "num_key_value_heads": "count",
        "head_dim": "count",
        "rms_norm_eps": "real",
        "rope_theta": "real",
        "max_position_embeddings": "count",
        "tie_word_embeddings": "flag",
        "bos_token_id": "token id",
        "eos_token_id": "token id",
        "rope_scaling": "judged by its own check",
    },
    RopeScaling: {
        "rope_type": "text",
        "factor": "real",
        "low_freq_factor": "real",
        "high_freq_factor": "real",
        "original_max_position_embeddings": "count",
    },
}
"""Each field's kind, which picks the values it must refuse."""

NOT_A_NUMBER = [True, False, "16", "0.5", "1e3", b"1", 1 + 0j, [1], math.nan]
REFUSED = {
    "count": [*NOT_A_NUMBER, 1.5, 2.0, math.inf, 10**30, MAX_COUNT + 1, 2**63, np.float64(2.0)],
    "real": [
        *NOT_A_NUMBER,
        math.inf,
        -math.inf,
        1e300,
        10**300,
        np.float64(1e300),
        1e-300,
        -1e-300,
        5e-324,
    ],
    "seed": [*NOT_A_NUMBER, 1.5, -1, 2**64, math.inf],
    "token id": [True, "1", 1.5, -1, 10**30, math.nan],
    "flag": [1, 0, "True", "", None, 1.0, np.int64(1)],
    "text": [16, 1.5, b"cpu", math.nan, True, ["cpu"]],
}
"""What each kind of field must refuse, whatever its range."""

FIELD_BASE = {(SamplingParams, "length_penalty"): dict(use_beam_search=True, beam_width=2)}
"""Fields that another field must enable before they are judged alone: a length penalty
without beam search is refused for that, whatever its value."""


def fields_of_kind(*kinds: str) -> list[tuple[type, str]]:
    return [
        (cls, name)
        for cls, fields in KINDS.items()
        for name, kind in fields.items()
        if kind in kinds
    ]


def refusal_of(cls: type, name: str, value: object) -> Exception | None:
    """The error making ``cls`` with ``name=value`` raises, or None when it is accepted."""
    try:
        cls(**{**BASE[cls], **FIELD_BASE.get((cls, name), {}), name: value})
    except (ValueError, TypeError) as error:
        return error
    return None


@pytest.mark.parametrize("cls", list(KINDS), ids=lambda cls: cls.__name__)
def test_every_field_has_a_kind(cls):
    assert [each.name for each in dataclasses.fields(cls)] == list(KINDS[cls]), (
        f"a field of {cls.__name__} has no kind here: add it to KINDS so its bad values are tried"
    )


CASES = [
    (cls, name, value)
    for cls, fields in KINDS.items()
    for name, kind in fields.items()
    for value in REFUSED.get(kind, [])
]


@pytest.mark.parametrize(
    "cls, name, value", CASES, ids=lambda x: x.__name__ if isinstance(x, type) else repr(x)[:24]
)
def test_a_value_no_run_can_use_is_refused_naming_the_field(cls, name, value):
    error = refusal_of(cls, name, value)
    assert error is not None, f"{cls.__name__}({name}={value!r}) was accepted"
    message = str(error)
    assert name in message and "\n" not in message, message


@pytest.mark.parametrize(
    "cls, name", fields_of_kind("count", "real"), ids=lambda x: getattr(x, "__name__", x)
)
def test_a_numpy_scalar_is_the_number_it_equals(cls, name):
    made = cls(**BASE[cls])
    value = getattr(made, name)
    if value is None:
        return
    numpy_value = (np.int64 if isinstance(value, int) else np.float64)(value)
    again = cls(**{**BASE[cls], name: numpy_value})
    assert getattr(again, name) == value and type(getattr(again, name)) is type(value)


@pytest.mark.parametrize(
    "cls, name", fields_of_kind("count"), ids=lambda x: getattr(x, "__name__", x)
)
def test_no_count_reaches_past_int32(cls, name):
    """``MAX_COUNT + 1`` is refused (the corpus above); this checks the refusal says the limit,
    so the user knows how far to come down."""
    message = str(refusal_of(cls, name, MAX_COUNT + 1))
    assert re.search(r"(to|at most) [0-9,]+", message), message


def test_a_real_hyperparameter_bound_is_where_the_model_stops_working():
    """RoPE's base must exceed 1 (its frequencies would grow, then overflow); RMSNorm's eps
    may be as small as float32's smallest normal, and a JSON integer is kept as a float."""
    llama = BASE[LlamaConfig]
    assert refusal_of(LlamaConfig, "rope_theta", 1) is not None
    assert "above 1" in str(refusal_of(LlamaConfig, "rope_theta", 1.0))
    assert LlamaConfig(**llama, rope_theta=1.001).rope_theta == 1.001
    tiny = np.finfo(np.float32).tiny.item()
    assert LlamaConfig(**llama, rms_norm_eps=tiny).rms_norm_eps == tiny
    assert refusal_of(LlamaConfig, "rms_norm_eps", tiny / 2) is not None
    assert type(LlamaConfig(**llama, rope_theta=10000).rope_theta) is float


def test_each_smallest_real_value_is_where_it_starts_to_mean_more_than_0():
    """top_p at float32's smallest normal is still a float32 number above 0; the smallest
    watermark keeps one block of the largest pool, and half of it none; the smallest length
    penalty moves the largest length's divisor off 1.0, and half of it does not."""
    from minipaged.beam_search import normalized
    from minipaged.config import MIN_WATERMARK
    from minipaged.sampling_rules import MIN_LENGTH_PENALTY, MIN_TOP_P

    assert np.float32(MIN_TOP_P) > 0 and np.float32(MIN_TOP_P / 2**24) == 0
    assert SamplingParams(top_p=MIN_TOP_P).top_p == MIN_TOP_P
    assert int(MIN_WATERMARK * MAX_COUNT) == 1 and int(MIN_WATERMARK / 2 * MAX_COUNT) == 0
    assert EngineConfig(watermark=MIN_WATERMARK).watermark == MIN_WATERMARK
    for sign in (1, -1):
        assert MAX_COUNT ** (sign * MIN_LENGTH_PENALTY) != 1.0
        assert MAX_COUNT ** (sign * MIN_LENGTH_PENALTY / 4) in (1.0, np.nextafter(1.0, 0))
    assert normalized(-2.0, MAX_COUNT, MIN_LENGTH_PENALTY) != -2.0


def test_the_largest_length_penalty_ranks_the_longest_least_likely_beam_finitely():
    """A beam of ``MAX_COUNT`` tokens, each as unlikely as float32 lets a token be: its
    normalized score is finite and non-zero at the bound, of either sign, and one past the
    bound it is not (the bound is as large as it can be)."""
    from minipaged.beam_search import normalized
    from minipaged.sampling_rules import MAX_LENGTH_PENALTY, MAX_TOKEN_NATS

    worst = -MAX_TOKEN_NATS * MAX_COUNT
    for alpha in (MAX_LENGTH_PENALTY, -MAX_LENGTH_PENALTY):
        assert math.isfinite(normalized(worst, MAX_COUNT, alpha))
        assert normalized(worst, MAX_COUNT, alpha) != 0
        assert SamplingParams(use_beam_search=True, beam_width=2, length_penalty=alpha)
    past = -(MAX_LENGTH_PENALTY + 1)
    assert not math.isfinite(normalized(worst, MAX_COUNT, past))
    assert "length_penalty" in str(refusal_of(SamplingParams, "length_penalty", past))
