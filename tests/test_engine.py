"""The engine against transformers' generate (the oracle) and against itself under memory
pressure: the same tokens whether or not sequences were preempted, swapped or recomputed."""

from __future__ import annotations

import pytest
import torch

from minipaged import invariants
from minipaged.checkpoint import load_model
from minipaged.engine import LLMEngine, RequestRejected
from minipaged.sampling import SamplingParams

PROMPTS = [[5, 9, 13, 17, 21, 3, 7], [11, 12, 13], list(range(20, 50)), [40, 41, 42, 43, 44]]
GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(hf_llama):
    return load_model(hf_llama[1])


def hf_generate(hf, prompt, max_new_tokens, **kwargs):
    tokens = torch.tensor([prompt])
    with torch.no_grad():
        out = hf.generate(
            tokens,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            **kwargs,
        )
    return [row[len(prompt) :].tolist() for row in out]


def run(engine, requests):
    """Add ``(prompt, params)`` requests, step to the end checking the invariants after every
    step; return the outputs by request id and every event kind seen."""
    for prompt, params in requests:
        engine.add_request({"prompt_token_ids": prompt}, params)
    outputs, kinds = {}, []
    while engine.has_unfinished():
        step = engine.step()
        invariants.assert_holds(step.state)
        kinds += [event.kind for event in step.events]
        for output in step.finished:
            outputs[output.request_id] = [c.token_ids for c in output.outputs]
    assert engine.block_manager.device.num_free == engine.block_manager.device.num_blocks
    return outputs, kinds


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_greedy_tokens_equal_transformers_for_every_block_size(hf_llama, model, block_size):
    hf, _ = hf_llama
    engine = LLMEngine(model, block_size=block_size, num_gpu_blocks=512 // block_size)
    outputs, _ = run(engine, [(p, GREEDY) for p in PROMPTS])
    for i, prompt in enumerate(PROMPTS):
        assert outputs[str(i)] == hf_generate(hf, prompt, 12), f"prompt {i}"


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_greedy_tokens_survive_preemption_unchanged(hf_llama, model, preemption):
    hf, _ = hf_llama
    engine = LLMEngine(
        model, block_size=4, num_gpu_blocks=12, num_cpu_blocks=16, preemption=preemption
    )
    outputs, kinds = run(engine, [(p, GREEDY) for p in PROMPTS])
    assert "preempt" in kinds, "the pool was meant to be too small for all requests at once"
    if preemption == "swap":
        assert "swap-out" in kinds and "swap-in" in kinds
    else:
        assert "recompute" in kinds
    for i, prompt in enumerate(PROMPTS):
        assert outputs[str(i)] == hf_generate(hf, prompt, 12), f"prompt {i}"


def test_n_greedy_samples_are_n_copies_of_the_greedy_continuation(hf_llama, model):
    hf, _ = hf_llama
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=64)
    params = SamplingParams(max_tokens=8, temperature=0, n=3, ignore_eos=True)
    outputs, kinds = run(engine, [(PROMPTS[0], params)])
    assert outputs["0"] == hf_generate(hf, PROMPTS[0], 8) * 3
    assert kinds.count("fork") == 2
    assert "cow-copy" in kinds, "7 prompt tokens end mid-block: the first write copies it"


def test_seeded_sampling_is_reproducible_and_diverse(model):
    params = SamplingParams(max_tokens=10, temperature=1.0, n=3, seed=7, ignore_eos=True)
    first, _ = run(LLMEngine(model, block_size=4, num_gpu_blocks=64), [(PROMPTS[0], params)])
    again, _ = run(
        LLMEngine(model, block_size=4, num_gpu_blocks=64),
        [(PROMPTS[1], GREEDY), (PROMPTS[0], params)],  # different company, same samples
    )
    assert first["0"] == again["1"]
    assert len({tuple(s) for s in first["0"]}) > 1, "three samples at T=1 should differ"


@pytest.mark.parametrize("beam_width", [2, 4])
def test_beam_search_equals_transformers_beam_search(hf_llama, model, beam_width):
    hf, _ = hf_llama
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=128)
    params = SamplingParams(
        max_tokens=8, temperature=0, use_beam_search=True, beam_width=beam_width, ignore_eos=True
    )
    outputs, kinds = run(engine, [(PROMPTS[2], params)])
    expected = hf_generate(
        hf,
        PROMPTS[2],
        8,
        num_beams=beam_width,
        num_return_sequences=beam_width,
        length_penalty=1.0,
        early_stopping=False,
    )
    assert outputs["0"] == expected
    assert "fork" in kinds and "free" in kinds


def test_request_larger_than_the_pool_is_rejected_and_others_still_finish(model):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=8)
    engine.add_request({"prompt_token_ids": PROMPTS[1]}, GREEDY)
    with pytest.raises(RequestRejected, match="only 8"):
        engine.add_request({"prompt_token_ids": PROMPTS[2]}, GREEDY)
    outputs, _ = run(engine, [])
    assert list(outputs) == ["0"]


def test_prompt_longer_than_the_context_is_refused_naming_both_lengths(model):
    engine = LLMEngine(model, block_size=16, num_gpu_blocks=64)
    with pytest.raises(ValueError, match="300 tokens but the model's context is 256"):
        engine.add_request({"prompt_token_ids": [3] * 300})
    assert not engine.has_unfinished()


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ({"prompt_token_ids": []}, "empty"),
        ({"prompt_token_ids": [1, 500]}, r"\[0, 128\)"),
        ({"tokens": [1]}, "prompt_token_ids"),
        ("text", "no tokenizer"),
    ],
)
def test_bad_prompts_are_refused_with_the_fix(model, prompt, message):
    with pytest.raises(ValueError, match=message):
        LLMEngine(model, num_gpu_blocks=16).add_request(prompt)


def test_step_output_reports_queues_sequences_and_token_counts(model):
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=64)
    engine.add_request({"prompt_token_ids": PROMPTS[0]}, GREEDY)
    first = engine.step()
    assert first.num_prefill_tokens == len(PROMPTS[0]) and first.num_decode_tokens == 0
    assert first.queues["running"] == ("0",)
    (view,) = first.sequences.values()
    assert list(view.token_ids) == [*PROMPTS[0], first.new_tokens[view.seq_id]]
    second = engine.step()
    assert second.num_prefill_tokens == 0 and second.num_decode_tokens == 1


def test_a_held_step_output_describes_its_own_step_and_one_without_a_snapshot_costs_none(
    model,
):
    """A ``StepOutput`` is a value: read after later steps, requests and aborts, its state and
    sequences still equal what a snapshot taken when the step ended says. A step asked for no
    snapshot (``LLM.generate`` with nobody watching) builds none."""
    engine = LLMEngine(model, block_size=4, num_gpu_blocks=24)
    params = SamplingParams(max_tokens=6, temperature=0, n=2, ignore_eos=True)
    for prompt in PROMPTS[:2]:
        engine.add_request({"prompt_token_ids": prompt}, params)
    held, eager = [], []
    for step in range(8):
        held.append(engine.step())
        eager.append((engine.block_manager.snapshot(), engine._views()))
        if step == 2:  # changes between steps must not leak into the held outputs either
            engine.add_request({"prompt_token_ids": PROMPTS[3]}, params)
        if step == 4:
            engine.abort_request("1")
    for output, (state, views) in zip(held, eager, strict=True):
        assert output.state == state
        assert output.sequences == views

    built = []
    snapshot = engine.block_manager.snapshot
    engine.block_manager.snapshot = lambda: built.append(1) or snapshot()
    while engine.has_unfinished():
        output = engine.step(snapshot=False)
        assert output.state is None and output.sequences is None
    assert built == []
