"""RoPE's frequency scalings (``minipaged.rope``) against Hugging Face transformers, the oracle:
the frequencies bit for bit, and a scaled checkpoint's greedy tokens token for token through
the paged engine. Each case is built so that the scaling changes the answer (a model that
ignored it would fail): the checkpoints' original context is shorter than the runs."""

from __future__ import annotations

import os

import pytest
import torch

from minipaged import LLM, SamplingParams
from minipaged.checkpoint import load_model
from minipaged.rope import RopeScaling, inverse_frequencies
from tests.test_peer_hf_oracle import MAX_TOKENS, hf_generate

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

CPU = torch.device("cpu")

LLAMA_31 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
"""Llama 3.1 and 3.2's own scaling (their ``config.json``)."""

SHORT_LLAMA3 = LLAMA_31 | {"factor": 4.0, "original_max_position_embeddings": 16}
"""Llama 3's rule with a context of 16, so that a run of 30 tokens is past it."""

SCALINGS = {
    "llama3.1": LLAMA_31,
    "llama3-short": SHORT_LLAMA3,
    "llama3-narrow-band": LLAMA_31 | {"low_freq_factor": 2.0, "high_freq_factor": 2.5},
    "linear": {"rope_type": "linear", "factor": 2.0},
    "linear-large": {"rope_type": "linear", "factor": 32.0},
}


def hf_config(scaling: dict, head_dim: int = 16, theta: float = 10000.0, **sizes):
    return transformers.LlamaConfig(
        vocab_size=sizes.get("vocab_size", 128),
        hidden_size=sizes.get("hidden_size", 4 * head_dim),
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=sizes.get("max_position_embeddings", 16384),
        rms_norm_eps=1e-5,
        rope_theta=theta,
        rope_scaling=dict(scaling),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )


@pytest.mark.parametrize("head_dim, theta", [(16, 10000.0), (64, 500000.0), (128, 500000.0)])
@pytest.mark.parametrize("name", SCALINGS)
def test_the_frequencies_equal_transformers_bit_for_bit(name, head_dim, theta):
    scaling = SCALINGS[name]
    config = hf_config(scaling, head_dim, theta)
    theirs, attention_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu")
    assert attention_factor == 1.0  # neither scaling changes the softmax's temperature
    ours = inverse_frequencies(head_dim, theta, RopeScaling.from_hf(scaling), CPU)
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, inverse_frequencies(head_dim, theta, None, CPU))


def test_llama3_keeps_the_fast_pairs_slows_the_slow_ones_and_blends_between():
    # L_orig 64: kept under 64 / 4 positions, slowed over 64 / 1; wavelengths 6.3, 20, 63, 199...
    scaling = RopeScaling.from_hf(SHORT_LLAMA3 | {"original_max_position_embeddings": 64})
    plain = inverse_frequencies(16, 10000.0, None, CPU)
    scaled = inverse_frequencies(16, 10000.0, scaling, CPU)
    wavelength = 2 * torch.pi / plain
    fast, slow = wavelength < 64 / 4, wavelength > 64 / 1
    assert fast.any() and slow.any() and (~fast & ~slow).any()  # all three bands are tested
    assert torch.equal(scaled[fast], plain[fast])
    assert torch.allclose(scaled[slow], plain[slow] / 4.0)
    between = ~fast & ~slow
    assert (scaled[between] < plain[between]).all()
    assert (scaled[between] > plain[between] / 4.0).all()


@pytest.fixture(scope="module", params=["llama3-short", "linear"])
def scaled_checkpoint(request, tmp_path_factory):
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.manual_seed(99)
    config = hf_config(SCALINGS[request.param], max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # peaky logits: no argmax is a float-rounding coin toss
        for layer in model.model.layers:  # sharp attention: where a key is matters
            layer.self_attn.q_proj.weight.mul_(4.0)
            layer.self_attn.k_proj.weight.mul_(4.0)
    path = tmp_path_factory.mktemp(f"rope_{request.param}")
    model.save_pretrained(path, safe_serialization=True)
    unscaled = transformers.LlamaForCausalLM(
        hf_config({"rope_type": "default"}, max_position_embeddings=128)
    ).eval()
    unscaled.load_state_dict(model.state_dict())  # the same weights, RoPE unscaled
    return model, path, unscaled


PROMPT = [5, 17, 99, 42, 8, 61, 23, 77, 3, 45, 12, 90]


def test_a_scaled_checkpoint_logits_equal_transformers_and_differ_unscaled(scaled_checkpoint):
    model, path, unscaled = scaled_checkpoint
    ours = load_model(path)
    assert ours.config.rope_scaling is not None
    tokens = torch.tensor([PROMPT * 3])  # 36 positions
    with torch.no_grad():
        theirs = model(tokens).logits[0]
        logits = ours.forward_contiguous(tokens)[0]
        plain = unscaled(tokens).logits[0]
    assert torch.allclose(logits, theirs, atol=1e-3, rtol=1e-4)
    assert (plain - theirs).abs().max() > 1e-2  # the scaling changes what the model says


@pytest.mark.parametrize("settings", [dict(block_size=4), dict(backend="numba-cpu", block_size=8)])
def test_a_scaled_checkpoint_greedy_tokens_equal_transformers(scaled_checkpoint, settings):
    model, path, unscaled = scaled_checkpoint
    (expected,) = hf_generate(model, PROMPT)  # 12 + 12 positions: past the original 16
    assert expected != hf_generate(unscaled, PROMPT)[0]  # ignoring the scaling would fail
    llm = LLM(model=str(path), **settings)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
    (result,) = llm.generate({"prompt_token_ids": PROMPT}, params)
    assert result.outputs[0].token_ids == expected


@pytest.mark.parametrize(
    "entry, says",
    [
        ({"rope_type": "yarn", "factor": 4.0}, "'yarn' is not supported: .*'linear' and 'llama3'"),
        ({"rope_type": "linear", "factor": float("inf")}, "factor .* from 1 to"),
        ({"rope_type": "linear", "factor": 0.5}, "factor .* from 1 to"),
        ({"rope_type": "linear", "factor": True}, "factor .* must be a number"),
        (LLAMA_31 | {"high_freq_factor": float("nan")}, "high_freq_factor .* must be a number"),
        (LLAMA_31 | {"low_freq_factor": 0}, "low_freq_factor .* must be a number from 1.18e-38"),
        (LLAMA_31 | {"low_freq_factor": 4.0}, "needs low_freq_factor < high_freq_factor"),
        (LLAMA_31 | {"original_max_position_embeddings": 8192.5}, "must be a positive integer"),
        ([("rope_type", "linear")], "must be an object"),
    ],
)
def test_a_bad_scaling_is_refused_naming_the_value(entry, says):
    with pytest.raises(ValueError, match=says):
        RopeScaling.from_hf(entry)


def test_the_scaling_reads_back_as_config_json_states_it():
    for entry in SCALINGS.values():
        assert RopeScaling.from_hf(entry).hf() == entry
    assert RopeScaling.from_hf({"rope_type": "default", "rope_theta": 10000.0}) is None
    assert RopeScaling.from_hf({"type": "linear", "factor": 2}) == RopeScaling("linear", 2.0)
