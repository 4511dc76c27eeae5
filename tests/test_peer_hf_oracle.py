"""A peer's oracle test: minipaged's Llama against Hugging Face transformers.

DESIGN.md: the small Llama "loads Hugging Face Llama checkpoints (``config.json`` +
``model.safetensors``, HF parameter names, HF's rotate-half RoPE)", and "greedy and beam-search
tokens equal Hugging Face transformers' ``LlamaForCausalLM`` on the same checkpoint, token for
token, including runs that preempt (swap and recompute)". One random checkpoint (grouped-query
attention: 4 query heads over 2 KV heads) is saved once per module with ``save_pretrained``
(safetensors, no tokenizer) and loaded with ``LLM(model=dir)``; prompts are token ids.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from minipaged import LLM, SamplingParams

MAX_TOKENS = 12
PROMPTS = [[5, 17, 99, 42, 8, 61, 23], [77, 3, 45], [12, 90, 33, 7, 101, 64, 28, 19, 55, 11]]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1234)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # peaky logits: no argmax is a float-rounding coin toss
        model.lm_head.weight.mul_(20.0)
    path = tmp_path_factory.mktemp("peer_llama")
    model.save_pretrained(path, safe_serialization=True)
    assert (path / "model.safetensors").exists() and (path / "config.json").exists()
    return model, path


def hf_generate(model, prompt, **kwargs):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_TOKENS,
            min_new_tokens=MAX_TOKENS,
            pad_token_id=0,
            do_sample=False,
            **kwargs,
        )
    return [row[len(prompt) :].tolist() for row in out]


@pytest.fixture(scope="module")
def hf_greedy(checkpoint):
    model, _ = checkpoint
    return [hf_generate(model, p)[0] for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_beams(checkpoint):
    model, _ = checkpoint
    return hf_generate(model, PROMPTS[0], num_beams=3, num_return_sequences=3, length_penalty=1.0)


def requests():
    return [{"prompt_token_ids": p} for p in PROMPTS]


GREEDY = SamplingParams(max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
BEAMS = SamplingParams(
    max_tokens=MAX_TOKENS, use_beam_search=True, beam_width=3, temperature=0, ignore_eos=True
)

PAGING = {
    "roomy": dict(block_size=16),
    "swap": dict(block_size=4, num_gpu_blocks=8, num_cpu_blocks=16, preemption="swap"),
    "recompute": dict(block_size=4, num_gpu_blocks=8, preemption="recompute"),
    "prefix-radix": dict(block_size=4, prefix_caching="radix"),
}


@pytest.mark.parametrize("paging", PAGING.values(), ids=PAGING.keys())
def test_greedy_tokens_equal_transformers(checkpoint, hf_greedy, paging):
    _, path = checkpoint
    llm = LLM(model=str(path), backend="torch", **paging)
    outputs = llm.generate(requests(), GREEDY)
    assert [r.outputs[0].token_ids for r in outputs] == hf_greedy


def test_a_tiny_pool_really_preempts(checkpoint):
    _, path = checkpoint
    kinds = set()
    for mode in ("swap", "recompute"):
        llm = LLM(model=path, backend="torch", **PAGING[mode])
        llm.generate(requests(), GREEDY, on_step=lambda s: kinds.update(e.kind for e in s.events))
    assert {"preempt", "swap-out", "swap-in", "recompute"} <= kinds


BEAM_PAGING = {
    "roomy": dict(block_size=16),
    # 3 beams of up to 19 tokens need up to 15 blocks of 4, the second request 12 more
    "swap": dict(block_size=4, num_gpu_blocks=16, num_cpu_blocks=32, preemption="swap"),
    "recompute": dict(block_size=4, num_gpu_blocks=16, preemption="recompute"),
}


@pytest.mark.parametrize("paging", BEAM_PAGING.values(), ids=BEAM_PAGING.keys())
def test_beam_search_tokens_equal_transformers(checkpoint, hf_beams, paging):
    _, path = checkpoint
    llm = LLM(model=str(path), backend="torch", **paging)
    kinds = set()
    outputs = llm.generate(
        [requests()[0], requests()[1]],
        BEAMS,
        on_step=lambda s: kinds.update(e.kind for e in s.events),
    )
    assert [c.token_ids for c in outputs[0].outputs] == hf_beams
    if "preemption" in paging:
        assert "preempt" in kinds


def test_the_kernels_cpu_twins_give_the_same_greedy_tokens(checkpoint, hf_greedy):
    pytest.importorskip("numba")
    _, path = checkpoint
    llm = LLM(model=str(path), backend="numba-cpu", block_size=8)
    outputs = llm.generate(requests(), GREEDY)
    assert [r.outputs[0].token_ids for r in outputs] == hf_greedy


def copy_with_eos(path, folder, eos, generation_eos=None):
    """Copy the checkpoint at ``path`` into ``folder``, with the generation_config.json that
    save_pretrained wrote beside config.json, and ``eos`` as both files' EOS (or
    ``generation_eos`` as generation_config.json's, where given)."""
    for name in ("model.safetensors", "config.json", "generation_config.json"):
        (folder / name).write_bytes((path / name).read_bytes())
    ends = {
        "config.json": eos,
        "generation_config.json": eos if generation_eos is None else generation_eos,
    }
    for name, value in ends.items():
        config = json.loads((folder / name).read_text())
        config["eos_token_id"] = value
        (folder / name).write_text(json.dumps(config))


def test_a_checkpoint_without_a_tokenizer_refuses_a_text_prompt_in_one_line(checkpoint):
    _, path = checkpoint
    llm = LLM(model=path, backend="torch")
    with pytest.raises(ValueError) as error:
        llm.generate("It is a truth", GREEDY)
    assert "prompt_token_ids" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "several, generation_only",
    [(False, False), (True, False), (False, True)],
    ids=["one eos", "a list of eos", "generation_config.json's eos"],
)
def test_greedy_stops_at_the_checkpoints_eos_as_transformers_does(
    checkpoint, hf_greedy, tmp_path, several, generation_only
):
    """With ``ignore_eos`` off, a sequence ends at the checkpoint's ``eos_token_id``: make the
    fourth greedy token of the first prompt the EOS of a copy of the checkpoint. Llama 3's
    config.json lists several, and a sequence ends at any of them: in the list, the one that
    comes is second, so stopping at the first alone would run on. Where
    generation_config.json names another EOS than config.json, transformers' generate stops
    at generation_config.json's."""
    _, path = checkpoint
    eos, never = hf_greedy[0][3], unused_token(hf_greedy[0])
    if generation_only:
        copy_with_eos(path, tmp_path, never, generation_eos=eos)
    else:
        copy_with_eos(path, tmp_path, [never, eos] if several else eos)
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():  # transformers reads config.json's EOS, one or a list, as for a user
        hf = hf_from_folder(tmp_path).generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_TOKENS, do_sample=False
        )
    expected = hf[0, len(PROMPTS[0]) :].tolist()
    assert expected[-1] == eos and len(expected) <= 4
    llm = LLM(model=tmp_path, backend="torch")
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0)
    (completion,) = llm.generate(requests()[0], params)[0].outputs
    assert completion.token_ids == expected
    assert completion.finish_reason == "stop"


@pytest.mark.parametrize(
    "length_penalty, several",
    [(1.0, False), (0.5, False), (1.0, True)],
    ids=["one eos", "one eos, length penalty 0.5", "a list of eos"],
)
def test_beams_that_end_at_eos_equal_transformers(
    checkpoint, hf_beams, tmp_path, length_penalty, several
):
    """EOS is the best beam's third token, so hypotheses finish early and the stopping rule
    (transformers' default, early_stopping=False) decides when the search ends; in a list of
    EOS tokens (Llama 3's), any ends a beam."""
    _, path = checkpoint
    eos = hf_beams[0][2]
    ends = [unused_token(*hf_beams), eos] if several else [eos]
    copy_with_eos(path, tmp_path, ends if several else eos)
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():  # transformers reads config.json's EOS, one or a list, as for a user
        rows = hf_from_folder(tmp_path).generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_TOKENS,
            num_beams=3,
            num_return_sequences=3,
            do_sample=False,
            pad_token_id=eos,
            length_penalty=length_penalty,
        )
    rows = rows[:, len(PROMPTS[0]) :].tolist()
    # each row up to its first end token, padding (the EOS) after it dropped
    expected = [
        row[: min((row.index(t) + 1 for t in ends if t in row), default=None)] for row in rows
    ]
    assert any(row[-1] == eos for row in expected)
    params = SamplingParams(
        max_tokens=MAX_TOKENS, use_beam_search=True, beam_width=3, length_penalty=length_penalty
    )
    llm = LLM(model=tmp_path, backend="torch")
    assert [c.token_ids for c in llm.generate(requests()[0], params)[0].outputs] == expected


def hf_from_folder(folder):
    """transformers' own model for ``folder``, so ``generate`` reads config.json's EOS as it
    would for a user (several, as a list)."""
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaForCausalLM.from_pretrained(folder).eval()


def unused_token(*outputs):
    """A token id none of ``outputs`` holds: an EOS that never comes."""
    return next(t for t in range(3, 128) if all(t not in row for row in outputs))
